"""Trainer(nonfinite=...): a NaN or infinite loss stops the fit by default (at the next logging step, epoch end or
checkpoint, whichever comes first), never reaches a checkpoint, and names the step and the last good checkpoint;
"warn" goes on; "skip_step" skips those steps and keeps the parameters finite."""

from __future__ import annotations

import math

import pytest
import torch

from tracktrain import Trainer
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.trainer.nonfinite import NonFiniteLoss

from ._tasks import Classifier, checkpoint_files, make_loader


class GoesNaN(Classifier):
    """Its loss is `bad` at the steps (1-based optimizer steps) in `at`."""

    def __init__(self, at=(7,), bad=math.nan) -> None:
        super().__init__()
        self.at, self.bad = set(at), bad

    def train_step(self, batch, batch_idx):
        loss = super().train_step(batch, batch_idx)
        if self.trainer.global_step + 1 in self.at:
            loss = loss * self.bad
        return loss


def fit(tmp_path, module, **kwargs):
    options = {
        "max_epochs": 2,
        "default_root_dir": tmp_path,
        "enable_progress_bar": False,
        "log_every_n_steps": 5,
        "callbacks": [ModelCheckpoint(every_n_train_steps=3, save_top_k=None)],
        **kwargs,
    }
    trainer = Trainer(**options)
    trainer.fit(module, make_loader())  # 8 steps an epoch
    return trainer


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_loss_stops_the_fit_before_a_checkpoint_could_hold_it(tmp_path, bad):
    with pytest.raises(NonFiniteLoss) as stopped:
        fit(tmp_path, GoesNaN(at=(7,), bad=bad))
    message = str(stopped.value)
    assert f"was {'NaN' if math.isnan(bad) else '+inf'} at step 7" in message
    assert f"the newest checkpoint before it is {tmp_path / 'checkpoints' / 'checkpoint_6.pt'}" in message
    assert "nonfinite='skip_step'" in message
    # the save at step 9 (after the bad step 7) checked first and refused: every checkpoint kept is finite
    assert checkpoint_files(tmp_path / "checkpoints") == ["checkpoint_3.pt", "checkpoint_6.pt"]


def test_it_is_found_at_the_next_logging_step_without_a_checkpoint(tmp_path):
    trainer = Trainer(
        max_epochs=2,
        default_root_dir=tmp_path,
        enable_progress_bar=False,
        log_every_n_steps=5,
        enable_checkpointing=False,
    )
    with pytest.raises(NonFiniteLoss, match=r"at step 2: .*; no checkpoint was taken before it"):
        trainer.fit(GoesNaN(at=(2,)), make_loader())
    assert trainer.global_step == 5  # the first logging step after it, before the epoch's end (step 8)


def test_warn_goes_on_and_says_so(tmp_path):
    with pytest.warns(UserWarning, match=r"was NaN at step 7.*Training goes on"):
        trainer = fit(tmp_path, GoesNaN(at=(7,)), nonfinite="warn", callbacks=[], enable_checkpointing=False)
    assert trainer.global_step == 16


def test_skip_step_skips_those_steps_and_the_parameters_stay_finite(tmp_path):
    reference = Classifier()
    expected = Trainer(
        max_epochs=2, default_root_dir=tmp_path / "ref", enable_progress_bar=False, enable_checkpointing=False
    )
    expected.fit(reference, make_loader())
    module = GoesNaN(at=(3, 11))
    with pytest.warns(UserWarning, match=r"Skipped 1 training step\(s\) whose loss was not finite"):
        trainer = fit(tmp_path, module, nonfinite="skip_step", callbacks=[], enable_checkpointing=False)
    assert trainer.global_step == 16 and trainer.nonfinite_watch.skipped_steps == 2
    assert all(torch.isfinite(p).all() for p in module.parameters())
    # two of the 16 SGD steps did not happen: the result differs from the reference, but not by much
    assert not all(torch.equal(a, b) for a, b in zip(module.parameters(), reference.parameters()))


def test_a_bad_policy_is_refused_where_it_is_given():
    with pytest.raises(
        ValueError, match=r"nonfinite=\.\.\.\) must be one of 'error', 'warn', 'skip_step', got 'ignore'"
    ):
        Trainer(nonfinite="ignore")
