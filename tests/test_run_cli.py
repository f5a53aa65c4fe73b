"""`tracktrain fit | validate | test | predict` (LightningCLI, tracktrain.cli, in subclass mode), for any module:
config files (YAML, JSON) merged with dotted options, every key checked against the class it goes to, the merged
config printed by --print_config (and runnable as given back), the module built from its init arguments so its
hparams reach the loggers as from a Python fit. Once through the installed console script, as users type it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F
import yaml

from tracktrain import Callback, DataModule, LoopModule
from tracktrain.checkpoint.state import read_checkpoint
from tracktrain_integrations import cli

from .trainer._tasks import make_loader

HERE = __name__  # the import path of this module: its classes are what the configs name

TRACKTRAIN = str(Path(sys.executable).with_name("tracktrain"))


@pytest.fixture(autouse=True)
def the_command_line_is_the_one_given(monkeypatch):
    """`cli.main(argv)` stands for `tracktrain ARGV` (pytest's own arguments would draw LightningCLI's warning)."""
    monkeypatch.setattr(sys, "argv", ["tracktrain"])


class Net(LoopModule):
    def __init__(self, lr: float = 0.05, hidden: int = 8) -> None:
        super().__init__()
        self.save_hyperparameters()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 2))

    def forward(self, x):
        return self.net(x)

    def train_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def eval_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class Needs(Net):
    def __init__(self, width: int, lr: float = 0.05) -> None:
        super().__init__(lr=lr, hidden=width)


class Data(DataModule):
    def __init__(self, batch_size: int = 8, n: int = 32) -> None:
        super().__init__()
        self.save_hyperparameters()

    def train_dataloader(self):
        return make_loader(n=self.hparams.n, batch_size=self.hparams.batch_size)

    def val_dataloader(self):
        return make_loader(n=16, seed=1)

    def test_dataloader(self):
        return make_loader(n=16, seed=2)


class Counts(Callback):
    fits: ClassVar[list[int]] = []

    def __init__(self, every: int = 1) -> None:
        self.every = every

    def on_fit_end(self, trainer, module):
        Counts.fits.append(trainer.global_step)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def quiet(root: Path) -> list[str]:
    return [
        f"--trainer.default_root_dir={root}",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        "--trainer.loggers=false",
    ]


def test_a_config_file_and_dotted_options_fit_the_module_they_name(tmp_path, capsys):
    config = tmp_path / "cfg.yaml"
    config.write_text(
        f"model:\n  class_path: {HERE}.Net\n  init_args: {{hidden: 16}}\n"
        f"data:\n  class_path: {HERE}.Data\ntrainer:\n  max_epochs: 3\n  enable_checkpointing: true\n"
        f"  callbacks:\n    - class_path: {HERE}.Counts\n      init_args: {{every: 2}}\n"
    )
    Counts.fits = []
    status, _, err = run(capsys, "fit", "--config", str(config), "--model.lr", "0.2", "--trainer.max_epochs", "2",
                         *quiet(tmp_path))  # fmt: skip
    assert status == 0, err
    assert Counts.fits == [8]  # 2 epochs (the option over the file) of 4 batches
    checkpoint = read_checkpoint(str(tmp_path / "checkpoints" / "checkpoint_8.pt"))
    assert checkpoint["trainer"]["settings"]["module"] == {"lr": 0.2, "hidden": 16}  # what save_hyperparameters kept
    saved = (tmp_path / "config.yaml").read_text()  # the merged config, in the run
    assert "lr: 0.2" in saved and "max_epochs: 2" in saved and f"class_path: {HERE}.Data" in saved
    status, _, err = run(capsys, "test", "--config", str(config), "--ckpt_path", "last", *quiet(tmp_path))
    assert status == 0, err


def test_print_config_gives_every_default_and_runs_the_same_when_given_back(tmp_path, capsys):
    args = ["--model", f"{HERE}.Net", "--data", f"{HERE}.Data", "--data.batch_size", "4", "--seed_everything", "3"]
    status, printed, err = run(capsys, "fit", *args, "--print_config")
    assert status == 0, err
    (tmp_path / "full.yaml").write_text(printed)
    full = yaml.safe_load((tmp_path / "full.yaml").read_text())
    assert full["model"] == {"class_path": f"{HERE}.Net", "init_args": {"lr": 0.05, "hidden": 8}}
    assert full["data"]["init_args"] == {"batch_size": 4, "n": 32}
    assert full["seed_everything"] == 3 and full["trainer"]["max_epochs"] is None  # the Trainer's own defaults
    status, again, _ = run(capsys, "fit", "--config", str(tmp_path / "full.yaml"), "--print_config")
    assert status == 0 and again == printed


def test_yaml_and_json_configs_merge_in_order(tmp_path, capsys):
    """jsonargparse reads YAML and JSON (a YAML subset); TOML configs are no longer read (one parser: LightningCLI's)."""
    (tmp_path / "a.yaml").write_text(f"model:\n  class_path: {HERE}.Net\n  init_args: {{hidden: 4, lr: 0.5}}\n")
    (tmp_path / "b.json").write_text(json.dumps({"model": {"init_args": {"lr": 0.25}}, "trainer": {"max_steps": 3}}))
    status, printed, err = run(
        capsys, "fit", "--config", str(tmp_path / "a.yaml"), "--config", str(tmp_path / "b.json"), "--print_config"
    )
    assert status == 0, err
    (tmp_path / "out.yaml").write_text(printed)
    full = yaml.safe_load((tmp_path / "out.yaml").read_text())
    assert full["model"]["init_args"] == {"lr": 0.25, "hidden": 4} and full["trainer"]["max_steps"] == 3


@pytest.mark.parametrize(
    ("argv", "message"),
    [  # jsonargparse's messages (the key, the value, what was expected)
        (["--model", f"{HERE}.Net", "--model.lrr", "0.1"], r"class_path 'tests.test_run_cli.Net':\s+Option 'lrr' is not accepted"),
        (["--model", f"{HERE}.Net", "--trainer.max_epochz", "2"], r"unrecognized arguments: --trainer.max_epochz 2. Did you mean trainer.max_epochs"),
        (["--model", f"{HERE}.Net", "--trainer.num_nodes", "2"], r"trainer.num_nodes is Lightning.s, which tracktrain does not take: use torchrun --nnodes"),
        (["--model", f"{HERE}.Needs"], r"class_path 'tests.test_run_cli.Needs':\s+the following arguments are required: width"),
        (["--model", f"{HERE}.Nothing"], rf"module '{HERE}' has no attribute 'Nothing'"),
        (["--model", f"{HERE}.Data"], r"Import path does not correspond to a subclass of LoopModule"),
        ([], r"the following arguments are required: fit.model"),
        (["--model", f"{HERE}.Net", "--data", f"{HERE}.Data", "--data.size", "4"], r"class_path 'tests.test_run_cli.Data':\s+Option 'size' is not accepted"),
        (["--model", f"{HERE}.Net", "--optimizer.lr", "1"], r"Parser key \"optimizer\"(.|\n)*class_path 'torch.optim.Optimizer':\s+Option 'lr' is not accepted"),
        (["--model", f"{HERE}.Net", "--trainer.callbacks", f'[{{"class_path": "{HERE}.Counts", "init_args": {{"each": 1}}}}]'],
         r"Parser key \"trainer.callbacks\"(.|\n)*class_path 'tests.test_run_cli.Counts':\s+Option 'each' is not accepted"),
        (["--config", "missing.yaml"], r"Parser key \"config\": File does not exist: '.*missing.yaml'"),
        (["--model", f"{HERE}.Net", "--seed_everything", "1", "--trainer.seed", "2"], r"seed_everything: 1 and trainer.seed: 2"),
    ],
)  # fmt: skip
def test_a_bad_key_is_an_error_naming_it_and_what_is_valid(tmp_path, capsys, argv, message):
    status, _, err = run(capsys, "fit", *argv, *quiet(tmp_path))
    assert status == 2
    assert re.search(message, err), err


def test_the_console_script_fits_a_module_of_the_working_directory(tmp_path):
    (tmp_path / "mypkg.py").write_text(
        "from tests.test_run_cli import Net, Data  # noqa: F401  (a user's package: its classes)\n"
    )
    (tmp_path / "cfg.yaml").write_text("trainer:\n  max_epochs: 1\n  enable_progress_bar: false\n")
    command = [TRACKTRAIN, "fit", "--model", "mypkg.Net", "--data", "mypkg.Data", "--config", "cfg.yaml"]
    command += ["--model.lr", "0.1", "--trainer.default_root_dir", "runs"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    params = yaml.safe_load(next((tmp_path / "runs" / "lightning_logs").glob("*/hparams.yaml")).read_text())
    assert params["module/lr"] == 0.1 and params["module/hidden"] == 8  # the module's hparams, as a Python fit logs
    assert (tmp_path / "runs" / "config.yaml").exists()
