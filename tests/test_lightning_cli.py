"""`tracktrain.cli.LightningCLI` as Lightning 2.6's: a script's classes from config files and the command line, the
subcommands, subclass mode, `run=False`, `--optimizer`/`--lr_scheduler`, `seed_everything`, `ckpt_path`, linked
arguments, `trainer_defaults`, the saved config. Each test builds the CLI in this process with `args=`, as a script
would from `sys.argv`; the classes the configs name are this module's."""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F
import yaml

from tracktrain import LoopModule, Trainer
from tracktrain.callbacks import EarlyStopping
from tracktrain.checkpoint.state import read_checkpoint
from tracktrain.cli import (
    LightningArgumentParser,
    LightningCLI,
    ReduceLROnPlateau,
    SaveConfigCallback,
    instantiate_class,
)

from .test_run_cli import Counts, Data, quiet

HERE = __name__
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def a_script_without_arguments(monkeypatch):
    """`args=` stands for the command line: the script's own (pytest's here) would draw LightningCLI's warning."""
    monkeypatch.setattr(sys, "argv", ["main.py"])


class Net(LoopModule):
    def __init__(self, lr: float = 0.05, hidden: int = 8, batch_size: int = 8) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 2))

    def forward(self, x):
        return self.net(x)

    def train_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def eval_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class Wide(Net):
    def __init__(self, width: int = 32, lr: float = 0.05) -> None:
        super().__init__(lr=lr, hidden=width)


def test_a_script_fits_its_classes_from_config_files_merged_in_order_and_options(tmp_path):
    (tmp_path / "a.yaml").write_text("model:\n  hidden: 16\n  lr: 0.5\ntrainer:\n  max_epochs: 3\n")
    (tmp_path / "b.yaml").write_text("model:\n  lr: 0.25\ndata:\n  batch_size: 4\n")
    args = ["fit", "--config", str(tmp_path / "a.yaml"), "--config", str(tmp_path / "b.yaml")]
    cli = LightningCLI(Net, Data, args=[*args, "--trainer.max_epochs", "2", *quiet(tmp_path)])

    assert cli.subcommand == "fit"
    assert dict(cli.model.hparams) == {"lr": 0.25, "hidden": 16, "batch_size": 8}  # b over a, a over the defaults
    assert cli.datamodule.hparams.batch_size == 4
    assert cli.trainer.global_step == 2 * 8  # the option over the files: 2 epochs of 32 samples in batches of 4
    checkpoint = read_checkpoint(str(next((tmp_path / "checkpoints").glob("*.pt"))))
    assert checkpoint["trainer"]["settings"]["module"] == {"lr": 0.25, "hidden": 16, "batch_size": 8}


def test_print_config_prints_the_merged_config_which_runs_the_same_given_back(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        LightningCLI(Net, Data, args=["fit", "--model.hidden", "4", "--seed_everything", "3", "--print_config"])
    assert exit.value.code == 0
    printed = capsys.readouterr().out
    full = yaml.safe_load(printed)
    assert full["model"] == {"lr": 0.05, "hidden": 4, "batch_size": 8} and full["seed_everything"] == 3
    assert full["trainer"]["max_epochs"] is None and full["optimizer"] is None and full["ckpt_path"] is None
    (tmp_path / "full.yaml").write_text(printed)
    with pytest.raises(SystemExit):
        LightningCLI(Net, Data, args=["fit", "--config", str(tmp_path / "full.yaml"), "--print_config"])
    assert capsys.readouterr().out == printed


def test_without_a_model_class_any_loop_module_is_chosen_by_class_path(tmp_path):
    cli = LightningCLI(datamodule_class=Data, run=False, args=["--model", f"{HERE}.Wide", "--model.width", "6"])
    assert type(cli.model) is Wide and cli.model.net[0].out_features == 6
    # subclass_mode_model with a base class: its subclasses only, by class_path or by name
    cli = LightningCLI(Net, Data, subclass_mode_model=True, run=False, args=["--model", "Wide"])
    assert type(cli.model) is Wide
    with pytest.raises(SystemExit):
        LightningCLI(Net, Data, subclass_mode_model=True, run=False, args=["--model", f"{HERE}.Data"])
    (tmp_path / "m.yaml").write_text(f"model:\n  class_path: {HERE}.Wide\n  init_args: {{width: 5}}\n")
    cli = LightningCLI(subclass_mode_model=True, run=False, args=["--config", str(tmp_path / "m.yaml")])
    assert type(cli.model) is Wide and cli.datamodule is None  # no data: the module's own loaders


def test_run_false_builds_the_classes_and_runs_nothing(tmp_path):
    cli = LightningCLI(Net, Data, run=False, args=["--model.lr", "0.3", "--trainer.max_epochs", "4", *quiet(tmp_path)])

    assert cli.subcommand is None and "subcommand" not in cli.config
    assert isinstance(cli.trainer, Trainer) and cli.trainer.max_epochs == 4 and cli.trainer.global_step == 0
    assert cli.model.hparams.lr == 0.3 and isinstance(cli.datamodule, Data) and cli.config.model.lr == 0.3
    assert not (tmp_path / "checkpoints").exists()
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)  # as Lightning's examples go on
    assert cli.trainer.global_step == 4 * 4


def test_optimizer_and_lr_scheduler_options_are_what_the_module_configures(tmp_path):
    # (the schedulers by their full class path: tracktrain.colossal has a StepLR too, when a test imported it)
    options = ["--optimizer", "AdamW", "--optimizer.lr", "0.02", "--lr_scheduler", "torch.optim.lr_scheduler.StepLR"]
    with pytest.warns(UserWarning, match=r"Net.configure_optimizers. will be overridden"):
        cli = LightningCLI(Net, Data, run=False, args=[*options, "--lr_scheduler.step_size", "3"])
    optimizers, schedulers = cli.model.configure_optimizers()
    assert type(optimizers[0]) is torch.optim.AdamW and optimizers[0].param_groups[0]["lr"] == 0.02
    assert type(schedulers[0]) is torch.optim.lr_scheduler.StepLR and schedulers[0].step_size == 3
    assert cli.config.optimizer.class_path == "torch.optim.AdamW"  # written as users write it

    plateau = ["--optimizer", "SGD", "--optimizer.lr", "0.1", "--lr_scheduler", "tracktrain.cli.ReduceLROnPlateau"]
    with pytest.warns(UserWarning):
        cli = LightningCLI(Net, Data, run=False, args=[*plateau, "--lr_scheduler.monitor", "val_loss"])
    configured = cli.model.configure_optimizers()
    assert isinstance(configured["lr_scheduler"]["scheduler"], ReduceLROnPlateau)
    assert configured["lr_scheduler"]["monitor"] == "val_loss"

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no --optimizer: the module's own, untouched
        cli = LightningCLI(Net, Data, run=False, args=[])
    assert type(cli.model.configure_optimizers()) is torch.optim.SGD

    with pytest.warns(UserWarning):
        cli = LightningCLI(
            Net, Data, args=["fit", "--optimizer", "Adam", "--trainer.max_epochs", "1", *quiet(tmp_path)]
        )
    assert type(cli.trainer.optimizers[0]) is torch.optim.Adam  # what the fit stepped


def test_seed_everything_seeds_the_classes_and_a_drawn_seed_is_recorded():
    first = LightningCLI(Net, Data, run=False, args=["--seed_everything", "7"])
    second = LightningCLI(Net, Data, run=False, args=["--seed_everything", "7"])
    assert torch.equal(first.model.net[0].weight, second.model.net[0].weight)
    drawn = LightningCLI(Net, Data, run=False, args=[])  # seed_everything_default=True: drawn
    assert isinstance(drawn.config.seed_everything, int) and not isinstance(drawn.config.seed_everything, bool)
    fixed = LightningCLI(Net, Data, run=False, seed_everything_default=11, args=[])
    assert fixed.config.seed_everything == 11
    assert LightningCLI(Net, Data, run=False, args=["--seed_everything", "false"]).config.seed_everything is False
    # one seed for the run: a drawn one is the Trainer's seed when it has one
    assert LightningCLI(Net, Data, run=False, args=["--trainer.seed", "5"]).config.seed_everything == 5


def test_a_subcommands_ckpt_path_reaches_the_trainer_and_its_hparams_rebuild_the_model(tmp_path):
    LightningCLI(Net, Data, args=["fit", "--model.hidden", "16", "--trainer.max_epochs", "1", *quiet(tmp_path)])
    (checkpoint,) = (tmp_path / "checkpoints").glob("*.pt")

    # no --model.hidden: the checkpoint's hyperparameters build the model it holds the weights of
    options = ["test", "--ckpt_path", str(checkpoint), *quiet(tmp_path)]
    cli = LightningCLI(Net, Data, save_config_kwargs={"overwrite": True}, args=options)
    assert cli.model.hparams.hidden == 16
    assert "test_loss" in cli.trainer.callback_metrics
    assert cli.config.test.ckpt_path == str(checkpoint)
    # Lightning 2.6's methods take weights_only (how torch.load reads the file); here checkpoints are read as plain data
    options = ["test", "--ckpt_path", str(checkpoint), "--weights_only", "true", *quiet(tmp_path)]
    assert LightningCLI(Net, Data, save_config_callback=None, args=options).config.test.weights_only is True


class LinkedCLI(LightningCLI):
    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(EarlyStopping, "early_stopping")
        parser.link_arguments("data.batch_size", "model.batch_size")
        parser.set_defaults({"early_stopping.monitor": "val_loss"})


class OptimizerNet(Net):
    """Builds the optimizer its `optimizer_init` config names (an optimizer group linked to it)."""

    def __init__(self, optimizer_init: dict | None = None) -> None:
        super().__init__()
        self.optimizer_init = optimizer_init

    def configure_optimizers(self):
        return instantiate_class(self.parameters(), self.optimizer_init)


class LinkedOptimizerCLI(LightningCLI):
    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_optimizer_args(torch.optim.Adam, link_to="model.optimizer_init")


def test_an_optimizer_group_linked_to_the_module_gives_it_its_config():
    cli = LinkedOptimizerCLI(OptimizerNet, Data, run=False, args=["--optimizer.lr", "0.3"])
    assert cli.model.optimizer_init["class_path"] == "torch.optim.adam.Adam"  # the module path, as Lightning gives it
    assert cli.model.optimizer_init["init_args"]["lr"] == 0.3
    optimizer = cli.model.configure_optimizers()  # its own: the group is linked, not AUTOMATIC
    assert type(optimizer) is torch.optim.Adam and optimizer.param_groups[0]["lr"] == 0.3


def test_linked_arguments_and_a_callback_group(tmp_path):
    cli = LinkedCLI(Net, Data, run=False, args=["--data.batch_size", "16", "--early_stopping.patience", "5"])
    assert cli.model.hparams.batch_size == 16  # linked from the data's
    (stopper,) = [callback for callback in cli.trainer.callbacks if isinstance(callback, EarlyStopping)]
    assert stopper.patience == 5 and stopper.monitor == "val_loss"
    with pytest.raises(SystemExit):  # a link's target is no option of its own
        LinkedCLI(Net, Data, run=False, args=["--model.batch_size", "4"])
    with pytest.raises(TypeError, match=r"give a subclass of Trainer, LoopModule, DataModule or Callback"):
        LightningArgumentParser().add_lightning_class_args(torch.nn.Linear, "linear")


def test_trainer_defaults_set_the_defaults_and_their_callbacks_are_always_there(tmp_path):
    Counts.fits = []
    defaults = {"max_epochs": 3, "callbacks": Counts(every=7)}
    cli = LightningCLI(Net, Data, trainer_defaults=defaults, run=False, args=[])
    assert cli.trainer.max_epochs == 3 and cli.config.trainer.max_epochs == 3
    cli = LightningCLI(
        Net, Data, trainer_defaults=defaults, args=["fit", "--trainer.max_epochs", "1", *quiet(tmp_path)]
    )
    assert Counts.fits == [4]  # the default callback ran, the option overrode the default epochs
    given = f'[{{"class_path": "{HERE}.Counts", "init_args": {{"every": 2}}}}]'
    cli = LightningCLI(Net, Data, trainer_defaults=defaults, run=False, args=["--trainer.callbacks", given])
    assert [callback.every for callback in cli.trainer.callbacks if isinstance(callback, Counts)] == [2, 7]


def test_a_config_names_tracktrains_callbacks_by_their_class_name():
    """`--trainer.callbacks+=EarlyStopping`: the callbacks and loggers are all imported, as Lightning's are."""
    options = ["--trainer.callbacks+=EarlyStopping", "--trainer.callbacks.monitor=val_loss"]
    cli = LightningCLI(Net, Data, run=False, args=[*options, "--trainer.callbacks+=LearningRateMonitor"])
    assert cli.config.trainer.callbacks[0].class_path == "tracktrain.callbacks.EarlyStopping"
    assert [type(callback).__name__ for callback in cli.trainer.callbacks][:2] == [
        "EarlyStopping",
        "LearningRateMonitor",
    ]


def test_the_merged_config_is_saved_in_the_run_and_sent_to_the_trackers(tmp_path):
    target = tmp_path / "tracker.jsonl"
    tracker = json.dumps(
        [{"class_path": "tests._file_tracker.FileTracker", "init_args": {"target": str(target), "delivery": "thread"}}]
    )
    options = [
        f"--trainer.default_root_dir={tmp_path}",
        "--trainer.enable_progress_bar=false",
        "--trainer.max_epochs=1",
    ]
    cli = LightningCLI(Net, Data, args=["fit", *options, "--trainer.loggers", tracker, "--model.lr", "0.2"])

    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert saved["model"]["lr"] == 0.2 and saved["trainer"]["max_epochs"] == 1 and "subcommand" not in saved
    assert saved["seed_everything"] == cli.config.fit.seed_everything  # the drawn seed, to run it again
    sent = [json.loads(line) for line in target.read_text().splitlines()]
    assert any(record.get("local_path") == str(tmp_path / "config.yaml") for record in sent)

    with pytest.raises(
        RuntimeError, match=r"expected .*config.yaml not to exist.*save_config_kwargs=\{\"overwrite\": True\}"
    ):
        LightningCLI(Net, Data, args=["fit", *quiet(tmp_path), "--trainer.max_epochs=1"])
    again = ["fit", *quiet(tmp_path), "--trainer.max_epochs=1"]
    LightningCLI(Net, Data, save_config_kwargs={"overwrite": True}, args=[*again, "--model.lr", "0.3"])
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["model"]["lr"] == 0.3
    LightningCLI(Net, Data, save_config_callback=None, args=[*again, "--model.lr", "0.4"])
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["model"]["lr"] == 0.3


class ConfigToTracker(SaveConfigCallback):
    saved: ClassVar[list[tuple[str, float]]] = []

    def save_config(self, trainer, module, stage):
        ConfigToTracker.saved.append((stage, self.config.model.lr))


def test_a_save_config_subclass_saves_where_it_wants(tmp_path):
    ConfigToTracker.saved = []
    options = ["test", *quiet(tmp_path), "--model.lr", "0.7"]
    LightningCLI(
        Net, Data, save_config_callback=ConfigToTracker, save_config_kwargs={"save_to_log_dir": False}, args=options
    )
    assert ConfigToTracker.saved == [("test", 0.7)] and not (tmp_path / "config.yaml").exists()
    with pytest.raises(ValueError, match=r"save_to_log_dir=False\) saves nothing: subclass it"):
        SaveConfigCallback(LightningArgumentParser(), None, save_to_log_dir=False)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["fit", "--model.lrr", "0.1"], r"Option 'lrr' is not accepted|unrecognized arguments: --model.lrr"),
        (["fit", "--trainer.num_nodes", "2"], r"trainer.num_nodes is Lightning.s, which tracktrain does not take: use torchrun --nnodes"),
        (["fit", "--trainer.max_epochz", "2"], r"Did you mean trainer.max_epochs"),
        (["fit", "--seed_everything", "1", "--trainer.seed", "2"], r"seed_everything: 1 and trainer.seed: 2 are two seeds"),
        (["fly"], r"invalid choice: 'fly'"),
        (["test", "--weights_only", "false"], r"weights_only: false: tracktrain reads a checkpoint as plain data only"),
    ],
)  # fmt: skip
def test_a_bad_option_is_an_error_naming_it(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit:
        LightningCLI(Net, Data, args=[*argv, *quiet(tmp_path)])
    assert exit.value.code == 2
    assert re.search(message, capsys.readouterr().err)


def test_the_names_and_arguments_are_lightnings():
    """Every public name of Lightning 2.6's `lightning.pytorch.cli` is here, and the classes take its arguments."""
    lightning_cli = pytest.importorskip("lightning.pytorch.cli")
    import tracktrain.cli

    aliases = {"LRSchedulerTypeTuple", "LRSchedulerTypeUnion", "LRSchedulerType", "ArgsType", "OptimizerCallable"}
    public = aliases | {"LRSchedulerCallable"}
    public |= {
        name
        for name, value in vars(lightning_cli).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == lightning_cli.__name__
    }
    assert public - {"ModuleType"} <= set(tracktrain.cli.__all__), public - set(tracktrain.cli.__all__)
    for name in ("LightningCLI", "SaveConfigCallback", "LightningArgumentParser", "ReduceLROnPlateau"):
        theirs, ours = getattr(lightning_cli, name), getattr(tracktrain.cli, name)
        assert list(inspect.signature(ours).parameters) == list(inspect.signature(theirs).parameters), name
        methods = {key for key, value in vars(theirs).items() if callable(value) and not key.startswith("_")}
        methods -= {"setup"}  # a Callback's setup: ours start at on_fit_start & co (a `setup` is refused, naming them)
        assert methods <= set(dir(ours)), (name, methods - set(dir(ours)))


def test_the_core_imports_without_jsonargparse_and_the_cli_says_how_to_install_it():
    code = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "jsonargparse":
            raise ImportError(f"blocked: {name}")
sys.meta_path.insert(0, Block())
import tracktrain, tracktrain.trainer, tracktrain.callbacks
assert "jsonargparse" not in sys.modules
try:
    import tracktrain.cli
except ImportError as error:
    print(error)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "tracktrain.cli (LightningCLI) needs jsonargparse" in result.stdout
    assert "pip install 'tracktrain[cli]'" in result.stdout


def _twin_loader(batch_size: int):
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(64, 4, generator=generator)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long()), batch_size=batch_size)


class Twin(LoopModule):
    """The module of the Lightning script below, renamed."""

    def __init__(self, hidden: int = 8, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 2))

    def forward(self, x):
        return self.net(x)

    def train_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class TwinData(Data):
    def __init__(self, batch_size: int = 8) -> None:
        super().__init__(batch_size=batch_size)

    def train_dataloader(self):
        return _twin_loader(self.hparams.batch_size)


def test_the_same_script_under_lightning_prints_the_same_config_and_trains_the_same_weights(tmp_path, capsys):
    """The classes of a LightningCLI script run by Lightning 2.6's LightningCLI and, renamed, by ours, from the same
    arguments: the same printed config (every section but the Trainer's, and without `weights_only`, Lightning's own)
    and, after the fit with --optimizer and --lr_scheduler, the same weights."""
    lightning = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.cli import LightningCLI as LightningsCLI

    class LightningTwin(lightning.LightningModule):
        def __init__(self, hidden: int = 8, lr: float = 0.1) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 2))

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.cross_entropy(self(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    class LightningTwinData(lightning.LightningDataModule):
        def __init__(self, batch_size: int = 8) -> None:
            super().__init__()
            self.save_hyperparameters()

        def train_dataloader(self):
            return _twin_loader(self.hparams.batch_size)

    options = ["--model.hidden", "6", "--data.batch_size", "16", "--optimizer", "Adam", "--optimizer.lr", "0.05"]
    options += ["--lr_scheduler", "torch.optim.lr_scheduler.StepLR", "--lr_scheduler.step_size", "1"]
    options += ["--seed_everything", "5"]
    fit = ["--trainer.max_epochs", "2", "--trainer.logger", "false", "--trainer.enable_progress_bar", "false"]
    fit += ["--trainer.enable_checkpointing", "false", "--trainer.enable_model_summary", "false"]
    printed, weights = {}, {}
    for name, cli_class, module, data in (
        ("lightning", LightningsCLI, LightningTwin, LightningTwinData),
        ("tracktrain", LightningCLI, Twin, TwinData),
    ):
        with pytest.raises(SystemExit):
            cli_class(module, data, args=["fit", *options, "--print_config"])
        config = yaml.safe_load(capsys.readouterr().out)
        printed[name] = {key: value for key, value in config.items() if key not in ("trainer", "weights_only")}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Lightning's advice on workers and the like
            cli = cli_class(module, data, args=["fit", *options, *fit, f"--trainer.default_root_dir={tmp_path / name}"])
        weights[name] = cli.model.state_dict()
    assert printed["lightning"] == printed["tracktrain"]
    for key, value in weights["lightning"].items():
        torch.testing.assert_close(weights["tracktrain"][key], value, rtol=1e-5, atol=1e-7)
