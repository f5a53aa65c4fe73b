"""`Trainer(num_sanity_val_steps=N)`: before a fit's first training batch, N validation batches run through
`eval_step` (default 2, as in Lightning) and leave nothing behind: no logged value, no checkpoint or early-stopping
decision, the random generators as they were."""

from __future__ import annotations

import csv
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tracktrain import Callback, Trainer
from tracktrain.callbacks import EarlyStopping, EarlyStoppingReason, ModelCheckpoint
from tracktrain.loggers import CSVLogger

from ._tasks import Classifier, make_loader


class _Recorder(Callback):
    """The hooks a fit ran, in order, with whether the sanity check was under way."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def on_fit_start(self, trainer, module):
        self.events.append("fit_start")

    def on_sanity_check_start(self, trainer, module):
        self.events.append("sanity_start")

    def on_validation_batch_start(self, trainer, module, batch, batch_idx):
        self.events.append("sanity_val_batch" if trainer.sanity_checking else "val_batch")

    def on_sanity_check_end(self, trainer, module):
        self.events.append("sanity_end")

    def on_train_start(self, trainer, module):
        self.events.append("train_start")

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.events.append("train_batch")


class _PerfectOnlyInSanity(Classifier):
    """Logs val_acc 1.0 during the sanity check and 0.1, 0.2, 0.3 in the real validations: anything that acted on the
    sanity check's values (a stop at a threshold, a best score the real ones never beat, a best checkpoint) shows."""

    def eval_step(self, batch, batch_idx):
        super().eval_step(batch, batch_idx)
        self.log("val_acc", 1.0 if self.trainer.sanity_checking else 0.1 * (self.trainer.current_epoch + 1))


class _Dropout(Classifier):
    """Draws from torch's generator in training (dropout) and from every generator in validation."""

    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def train_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(self.drop(x)), y)
        self.log("train_loss", loss)
        return loss

    def eval_step(self, batch, batch_idx):
        super().eval_step(batch, batch_idx)
        random.random(), np.random.rand(), torch.rand(1)  # as an augmentation or a sampled metric would


def _trainer(tmp_path, **kwargs) -> Trainer:
    options = {"max_epochs": 2, "enable_progress_bar": False, "enable_model_summary": False, "loggers": False}
    return Trainer(default_root_dir=tmp_path, **{**options, **kwargs})


def test_default_runs_two_validation_batches_before_training_in_hook_order(tmp_path):
    recorder = _Recorder()
    trainer = _trainer(tmp_path, max_epochs=1, enable_checkpointing=False, callbacks=[recorder])
    trainer.fit(Classifier(), make_loader(n=32), make_loader(n=24, seed=1))
    assert recorder.events[:6] == [
        "fit_start",
        "sanity_start",
        "sanity_val_batch",
        "sanity_val_batch",
        "sanity_end",
        "train_start",
    ]
    assert recorder.events.count("val_batch") == 3  # the epoch's validation: all 3 batches, after training
    assert not trainer.sanity_checking


@pytest.mark.parametrize(
    ("steps", "limit", "expected"), [(0, None, 0), (1, None, 1), (-1, None, 3), (5, None, 3), (-1, 2, 2)]
)
def test_number_of_batches_follows_the_setting_and_the_validation_limit(tmp_path, steps, limit, expected):
    recorder = _Recorder()
    trainer = _trainer(
        tmp_path,
        max_epochs=1,
        enable_checkpointing=False,
        callbacks=[recorder],
        num_sanity_val_steps=steps,
        limit_val_batches=limit,
    )
    trainer.fit(Classifier(), make_loader(n=16), make_loader(n=24, seed=1))
    assert recorder.events.count("sanity_val_batch") == expected
    assert ("sanity_start" in recorder.events) == (expected > 0)


def test_no_validation_loader_no_sanity_check_and_fast_dev_run_turns_it_off(tmp_path):
    recorder = _Recorder()
    _trainer(tmp_path, max_epochs=1, enable_checkpointing=False, callbacks=[recorder]).fit(Classifier(), make_loader())
    assert "sanity_start" not in recorder.events
    trainer = _trainer(tmp_path, fast_dev_run=1, callbacks=[recorder := _Recorder()])
    assert trainer.num_sanity_val_steps == 0
    trainer.fit(Classifier(), make_loader(), make_loader(seed=1))
    assert recorder.events.count("val_batch") == 1 and "sanity_start" not in recorder.events


def test_its_values_reach_no_logger_and_no_decision(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="val_acc", mode="max", save_top_k=1)
    # the sanity check's 1.0 would meet the threshold at once, or be a best that the real values never beat
    stopping = EarlyStopping(monitor="val_acc", mode="max", stopping_threshold=0.95, patience=1)
    seen_after_sanity: dict[str, float] = {}

    class AfterSanity(Callback):
        def on_sanity_check_end(self, trainer, module):
            seen_after_sanity.update(trainer.callback_metrics)

    trainer = _trainer(
        tmp_path,
        max_epochs=3,
        callbacks=[checkpoint, stopping, AfterSanity()],
        loggers=[CSVLogger(save_dir=tmp_path / "csv")],
    )
    trainer.fit(_PerfectOnlyInSanity(), make_loader(n=32), make_loader(n=24, seed=1))
    assert seen_after_sanity == {}  # discarded before training starts
    assert trainer.current_epoch == 3 and stopping.stopping_reason is EarlyStoppingReason.NOT_STOPPED
    assert stopping.best_score == pytest.approx(0.3)
    assert "val_acc=0.3000" in checkpoint.best_model_path  # the score it kept is a real validation's
    (metrics_file,) = (tmp_path / "csv").rglob("metrics.csv")
    with open(metrics_file, newline="") as file:
        rows = list(csv.DictReader(file))
    val_acc = [float(row["val_acc"]) for row in rows if row.get("val_acc")]
    assert val_acc == pytest.approx([0.1, 0.2, 0.3])  # one per epoch, none from the sanity check
    assert trainer.logged_metrics["val_acc"] == pytest.approx(0.3)


def test_random_generators_are_as_before_so_the_run_trains_the_same(tmp_path):
    class GeneratorsAtTrainStart(Callback):
        def on_train_start(self, trainer, module):
            self.states = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())

    def run(steps: int) -> tuple[list[torch.Tensor], tuple]:
        module, generators = _Dropout(), GeneratorsAtTrainStart()
        trainer = _trainer(
            tmp_path / str(steps),
            seed=3,
            enable_checkpointing=False,
            num_sanity_val_steps=steps,
            callbacks=[generators],
        )
        # the validation loader shuffles and its eval_step draws: the sanity check takes from every generator
        trainer.fit(module, make_loader(n=48, shuffle=True), make_loader(n=24, seed=1, shuffle=True))
        return [parameter.detach().clone() for parameter in module.parameters()], generators.states

    (without, states_without), (with_sanity, states_with) = run(0), run(2)
    assert torch.equal(states_without[0], states_with[0])
    assert states_without[1] == states_with[1]
    assert np.array_equal(states_without[2], states_with[2])
    assert all(torch.equal(a, b) for a, b in zip(without, with_sanity, strict=True))


def test_a_bug_in_eval_step_fails_before_any_training_batch(tmp_path):
    class Broken(Classifier):
        def eval_step(self, batch, batch_idx):
            raise RuntimeError("bug in eval_step")

    recorder = _Recorder()
    with pytest.raises(RuntimeError, match="bug in eval_step"):
        _trainer(tmp_path, callbacks=[recorder]).fit(Broken(), make_loader(), make_loader(seed=1))
    assert "train_batch" not in recorder.events
    assert not list(tmp_path.rglob("*.pt"))  # nothing was trained, so nothing was saved


@pytest.mark.parametrize("bad", [-2, 1.5, True, "2"])
def test_bad_value_is_refused_with_the_meaning(bad):
    with pytest.raises(ValueError, match=r"num_sanity_val_steps=.*0 turns the sanity check off, -1 runs all"):
        Trainer(num_sanity_val_steps=bad)
