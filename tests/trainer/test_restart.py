"""Running the same fit again: a finished run trains nothing, a raised limit continues the same counters, changed
settings are reported (and refused when they make it another model), and the seed is drawn and kept when none is
given. (Kill/resume exactness with real processes: test_kill_resume.py.)"""

from __future__ import annotations

import csv
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from torch.utils.data import DataLoader, Dataset

from tracktrain import Trainer
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.checkpoint.run_settings import ResumeMismatch

from ._tasks import Classifier, make_loader


class Counting(Classifier):
    """Counts its training steps, and has hparams (what a changed-settings check compares)."""

    def __init__(self, lr: float = 0.1, width: int = 2, interrupt_at: int | None = None) -> None:
        super().__init__(lr)
        self.hparams = {"lr": lr, "width": width}
        self.steps_run = 0
        self.interrupt_at = interrupt_at

    def train_step(self, batch, batch_idx):
        if self.trainer.global_step == self.interrupt_at:
            raise KeyboardInterrupt  # as a Ctrl-C would
        self.steps_run += 1
        return super().train_step(batch, batch_idx)


def fit(root: Path, module=None, loader=None, **kwargs) -> tuple[Trainer, Counting]:
    module = module or Counting()
    options = {
        "max_epochs": 2,
        "resume": "auto",
        "default_root_dir": root,
        "enable_progress_bar": False,
        "log_every_n_steps": 1,
        **kwargs,
    }
    trainer = Trainer(**options)
    trainer.fit(module, loader or make_loader(n=32, shuffle=True))
    return trainer, module


def metric_rows(root: Path) -> list[dict[str, str]]:
    (path,) = root.glob("lightning_logs/version_*/metrics.csv")
    with open(path, newline="") as rows:
        return list(csv.DictReader(rows))


def test_a_finished_run_trains_nothing_says_so_and_leaves_the_tracker_alone(tmp_path, without_tensorboard, capsys):
    first, _ = fit(tmp_path)
    assert first.global_step == 8  # 2 epochs of 4 batches
    rows = metric_rows(tmp_path)
    status = next(tmp_path.glob("lightning_logs/version_*/status.txt")).read_text()

    again, module = fit(tmp_path)
    assert module.steps_run == 0
    assert again.global_step == 8
    assert again.ckpt_path.endswith("checkpoint_8.pt")
    line = [line for line in capsys.readouterr().err.splitlines() if "already finished" in line]
    assert len(line) == 1 and "epoch 2, step 8" in line[0] and "raise max_epochs (now 2)" in line[0]
    assert metric_rows(tmp_path) == rows  # not a row more, and no second run
    assert len(list(tmp_path.glob("lightning_logs/version_*"))) == 1
    assert next(tmp_path.glob("lightning_logs/version_*/status.txt")).read_text() == status


def test_max_steps_reached_is_finished_too(tmp_path):
    fit(tmp_path, max_epochs=None, max_steps=6)
    again, module = fit(tmp_path, max_epochs=None, max_steps=6)
    assert module.steps_run == 0 and again.global_step == 6


def test_a_raised_limit_continues_the_same_run_bit_identical_to_one_long_fit(tmp_path, without_tensorboard):
    _, reference = fit(tmp_path / "long", max_epochs=3, seed=4)
    fit(tmp_path / "split", max_epochs=2, seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # raising the limit is the way to train more: no warning
        again, module = fit(tmp_path / "split", max_epochs=3, seed=4)
    assert again.resume_changes == {"trainer/max_epochs": (2, 3)}  # what the loggers record
    assert module.steps_run == 4 and again.global_step == 12
    for a, b in zip(module.parameters(), reference.parameters()):
        assert torch.equal(a, b)
    steps = [int(row["step"]) for row in metric_rows(tmp_path / "split")]
    assert steps == sorted(steps) and steps[-1] == 12  # one monotonic axis in one run's file
    epochs = [float(row["epoch"]) for row in metric_rows(tmp_path / "split") if row["epoch"]]
    assert epochs == sorted(epochs) and epochs[-1] == 2.0  # the third epoch is epoch 2, not 0 again


def test_without_a_seed_one_is_drawn_kept_in_the_checkpoint_and_reused_on_resume(tmp_path):
    first, _ = fit(tmp_path, max_epochs=1)
    assert isinstance(first.run_seed, int)
    assert first.settings["trainer"]["seed"] == first.run_seed  # what the loggers record as a param
    params = yaml.safe_load(next(tmp_path.glob("lightning_logs/version_*/hparams.yaml")).read_text())
    assert params["trainer/seed"] == first.run_seed
    module = Counting()  # it seeds torch (0) as the first one did: the same seed would be drawn
    torch.seed()  # as in a script that seeds nothing: another run, another seed
    other, _ = fit(tmp_path / "other", module, max_epochs=1)
    assert other.run_seed != first.run_seed
    again, _ = fit(tmp_path, max_epochs=2)
    assert again.run_seed == first.run_seed


def test_changed_module_hyperparameters_are_refused_with_the_difference_and_the_flag(tmp_path):
    fit(tmp_path, module=Counting(lr=0.1))
    with pytest.raises(ResumeMismatch) as refused:
        fit(tmp_path, module=Counting(lr=0.5), max_epochs=3)
    message = str(refused.value)
    assert "module/lr: 0.1 -> 0.5" in message and "resume_with_changes=True" in message
    assert "checkpoint_8.pt" in message


def test_another_module_class_is_refused_before_anything_is_loaded(tmp_path):
    class Other(Counting):
        pass

    fit(tmp_path)
    module = Other()
    before = [p.detach().clone() for p in module.parameters()]
    with pytest.raises(ResumeMismatch, match=r"module/class: 'Counting' -> .*Other"):
        fit(tmp_path, module=module, max_epochs=3)
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters()))


def test_resume_with_changes_continues_and_reports_them(tmp_path):
    fit(tmp_path, module=Counting(lr=0.1))
    with pytest.warns(UserWarning, match=r"changed settings: module/lr: 0.1 -> 0.5. The run continues"):
        again, module = fit(tmp_path, module=Counting(lr=0.5), max_epochs=3, resume_with_changes=True)
    assert module.steps_run == 4
    assert again.resume_changes == {"module/lr": (0.1, 0.5), "trainer/max_epochs": (2, 3)}


class CountingDataset(Dataset):
    """Counts the samples it loads: resuming must not load the batches it skips."""

    def __init__(self, n: int) -> None:
        self.x = torch.randn(n, 4, generator=torch.Generator().manual_seed(0))
        self.loaded = 0

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index):
        self.loaded += 1
        return self.x[index], (self.x[index, 0] > 0).long()


def test_resuming_at_90_percent_of_an_epoch_loads_only_the_batches_it_trains_on(tmp_path):
    dataset = CountingDataset(2000)  # 1000 batches of 2
    loader = DataLoader(dataset, batch_size=2, shuffle=True)
    _, reference = fit(tmp_path / "reference", loader=loader, max_epochs=1, seed=5, enable_checkpointing=False)
    checkpoint = ModelCheckpoint(every_n_train_steps=900, save_top_k=1)
    with pytest.raises(KeyboardInterrupt):
        fit(tmp_path, module=Counting(interrupt_at=901), loader=loader, max_epochs=1, seed=5, callbacks=[checkpoint])
    dataset.loaded = 0
    again, module = fit(tmp_path, loader=loader, max_epochs=1, callbacks=[ModelCheckpoint(every_n_train_steps=900)])
    assert again.ckpt_path.endswith("checkpoint_900.pt")
    assert module.steps_run == 100
    assert dataset.loaded == 200  # the 100 batches trained on, not one of the 900 skipped
    for a, b in zip(module.parameters(), reference.parameters()):  # and they were the right 100
        assert torch.equal(a, b)


def test_deterministic_only_asks_torch_for_deterministic_kernels(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer, _ = fit(tmp_path, deterministic=True, max_epochs=1)
    try:
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)
    plain, _ = fit(tmp_path / "plain", max_epochs=1)
    assert type(trainer.train_engine) is type(plain.train_engine)  # exact resume either way


def _worsening_from_epoch_two(base, train_name, eval_name):
    """A module of `base` (ours or Lightning's) whose "v" worsens from epoch 2 (EarlyStopping(patience=1) stops the
    fit after epoch 1), recording the epochs it trains."""

    def init(self):
        base.__init__(self)
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 2)
        self.epochs = []

    def train(self, batch, batch_idx):
        return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])

    def evaluate(self, batch, batch_idx):
        self.log("v", float(self.current_epoch >= 2))

    def on_train_epoch_start(self):
        self.epochs.append(self.current_epoch)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    methods = {"__init__": init, train_name: train, eval_name: evaluate, "on_train_epoch_start": on_train_epoch_start}
    return type("Worsening", (base,), {**methods, "configure_optimizers": configure_optimizers})


@pytest.mark.parametrize("checkpoints", [False, True], ids=["in-memory", "with-checkpoints"])
def test_a_fit_after_an_early_stopped_one_continues_its_counters_as_lightnings(tmp_path, checkpoints):
    """Lightning's Trainer counts epochs and steps across fits: after EarlyStopping ended a fit before max_epochs, the
    next fit on it goes on from that epoch and step (ours started a new run at 0)."""
    lightning = pytest.importorskip("lightning.pytorch")
    from tracktrain import LoopModule
    from tracktrain.callbacks import EarlyStopping

    seen = {}
    for name, base, trainer_class, stopping, steps in (
        ("ours", LoopModule, Trainer, EarlyStopping, ("train_step", "eval_step")),
        ("lightning", lightning.LightningModule, lightning.Trainer, lightning.callbacks.EarlyStopping,
         ("training_step", "validation_step")),
    ):  # fmt: skip
        module = _worsening_from_epoch_two(base, *steps)()
        trainer = trainer_class(
            max_epochs=10, logger=False, enable_checkpointing=checkpoints, enable_progress_bar=False,
            enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=tmp_path / name,
            callbacks=[stopping("v", patience=1)],
        )  # fmt: skip
        runs = []
        for _ in range(2):
            module.epochs = []
            trainer.fit(module, make_loader(n=32), make_loader(n=16))
            runs.append((module.epochs, trainer.current_epoch, trainer.global_step))
        seen[name] = runs
    assert seen["ours"] == [([0, 1], 2, 8), ([2], 3, 12)]
    assert seen["ours"] == seen["lightning"]
