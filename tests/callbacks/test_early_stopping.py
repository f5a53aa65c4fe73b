"""EarlyStopping in real fits: a module logs a scripted validation value per epoch; the run stops where it must."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from tracktrain.callbacks.early_stopping import EarlyStopping, EarlyStoppingReason
from tracktrain.callbacks.model_checkpoint import ModelCheckpoint

from .conftest import TinyModule, batches


def run(make_trainer, script: list[float], max_epochs: int | None = None, **options: Any):
    """Fit TinyModule logging `script[n]` as val_metric in the n-th validation; returns (early_stopping, trainer,
    module)."""
    early_stopping = EarlyStopping("val_metric", **options)
    trainer = make_trainer(max_epochs=max_epochs or len(script), callbacks=[early_stopping])
    module = TinyModule(val_script=script)
    trainer.fit(module, batches(2), batches(1))
    return early_stopping, trainer, module


@pytest.mark.parametrize(
    "mode, min_delta, patience, script, stop_at",
    [
        ("min", 0.0, 2, [1.0, 0.9, 0.95, 0.95, 0.5, 0.4], 3),  # no improvement at 2 and 3
        ("min", 0.0, 2, [1.0, 0.9, 0.95, 0.8, 0.85, 0.9], 5),  # the improvement at 3 resets the count
        ("min", 0.0, 1, [1.0, 1.0, 0.5], 1),  # equal is no improvement
        ("min", 0.1, 2, [1.0, 0.95, 0.91, 0.5], 2),  # improvements smaller than min_delta do not count
        ("min", 0.1, 2, [1.0, 0.85, 0.8, 0.78, 0.5], 3),  # 0.85 improves by 0.15; 0.8 and 0.78 by less than 0.1
        ("max", 0.0, 2, [0.1, 0.2, 0.2, 0.15, 0.9], 3),
        ("max", 0.05, 1, [0.1, 0.2, 0.24, 0.9], 2),
        ("max", 0.0, 3, [0.1, 0.2, 0.3, 0.4, 0.5], None),  # always improving: never stops
    ],
)
def test_stops_after_patience_checks_without_improvement(make_trainer, mode, min_delta, patience, script, stop_at):
    early_stopping, trainer, module = run(make_trainer, script, mode=mode, min_delta=min_delta, patience=patience)
    epochs_run = len(script) if stop_at is None else stop_at + 1
    assert module.validations == epochs_run
    assert trainer.current_epoch == epochs_run
    if stop_at is None:
        assert early_stopping.stopping_reason is EarlyStoppingReason.NOT_STOPPED
    else:
        assert early_stopping.stopped_epoch == stop_at
        assert early_stopping.wait_count == patience
        assert early_stopping.stopping_reason is EarlyStoppingReason.PATIENCE_EXHAUSTED
        assert "did not improve in the last" in early_stopping.stopping_reason_message


@pytest.mark.parametrize(
    "mode, script, options, stop_at, reason",
    [
        ("min", [1.0, 0.8, 0.45, 0.3], {"stopping_threshold": 0.5}, 2, EarlyStoppingReason.STOPPING_THRESHOLD),
        ("max", [0.5, 0.96, 0.97], {"stopping_threshold": 0.95}, 1, EarlyStoppingReason.STOPPING_THRESHOLD),
        ("min", [1.0, 2.0, 6.0, 0.1], {"divergence_threshold": 5.0}, 2, EarlyStoppingReason.DIVERGENCE_THRESHOLD),
        ("max", [0.5, 0.4, 0.05], {"divergence_threshold": 0.1}, 2, EarlyStoppingReason.DIVERGENCE_THRESHOLD),
        ("min", [1.0, 0.9, math.nan, 0.1], {}, 2, EarlyStoppingReason.NON_FINITE_METRIC),
        ("max", [1.0, math.inf, 0.5], {}, 1, EarlyStoppingReason.NON_FINITE_METRIC),
    ],
)
def test_thresholds_and_non_finite_values_stop_at_once(make_trainer, mode, script, options, stop_at, reason):
    early_stopping, trainer, module = run(make_trainer, script, mode=mode, patience=10, **options)
    assert module.validations == stop_at + 1
    assert early_stopping.stopped_epoch == stop_at
    assert early_stopping.stopping_reason is reason


def test_without_check_finite_a_nan_is_just_no_improvement(make_trainer):
    early_stopping, _, module = run(make_trainer, [1.0, math.nan, 0.5, 0.4], patience=2, check_finite=False)
    assert module.validations == 4
    assert early_stopping.best_score == pytest.approx(0.4)  # logged as float32


def test_without_check_finite_nans_count_as_lightning_counts_them():
    """Lightning asks `value > bar` for an improvement, so a NaN never improves (Ignite's face answers otherwise)."""
    lightning = pytest.importorskip("pytorch_lightning.callbacks.early_stopping")
    for mode in ("min", "max"):
        values = [math.nan, 0.5, math.nan, math.nan, 0.4, 0.6, math.nan]
        ours = EarlyStopping("m", mode=mode, patience=10, check_finite=False)
        theirs = lightning.EarlyStopping("m", mode=mode, patience=10, check_finite=False)
        for value in values:
            ours._evaluate(value)
            theirs._evaluate_stopping_criteria(torch.tensor(value, dtype=torch.float64))
            assert (ours.wait_count, repr(ours.best_score)) == (theirs.wait_count, repr(float(theirs.best_score)))


def test_matches_lightning_on_the_same_values():
    """Our decisions step by step against Lightning's EarlyStopping fed the same values."""
    lightning = pytest.importorskip("pytorch_lightning.callbacks.early_stopping")
    g = torch.Generator().manual_seed(3)
    for trial in range(40):
        values = (torch.rand(12, generator=g) * 2).tolist()
        values[int(torch.randint(0, 12, (1,), generator=g))] = [math.nan, 0.05, 1.95][trial % 3]
        options = {
            "mode": ("min", "max")[trial % 2],
            "min_delta": [0.0, 0.1, 0.3][trial % 3],
            "patience": 1 + trial % 4,
            "stopping_threshold": [None, 0.1, 1.9][trial % 3],
            "divergence_threshold": [None, 1.9, 0.1][trial % 5 % 3],
        }
        ours, theirs = EarlyStopping("m", **options), lightning.EarlyStopping("m", **options)
        for value in values:
            our_stop, _ = ours._evaluate(value)
            their_stop, _ = theirs._evaluate_stopping_criteria(torch.tensor(value, dtype=torch.float64))
            assert (our_stop, ours.wait_count) == (their_stop, theirs.wait_count), (options, values)
            assert ours.stopping_reason.name == theirs.stopping_reason.name
            if our_stop:
                break


def test_without_validation_it_checks_at_each_training_epoch_end(make_trainer):
    class TrainScript(TinyModule):
        def train_step(self, batch, batch_idx):
            self.log("train_metric", [3.0, 2.0, 2.5, 2.5, 1.0][self.current_epoch], on_epoch=True, on_step=False)
            return super().train_step(batch, batch_idx)

    early_stopping = EarlyStopping("train_metric", patience=2)
    trainer = make_trainer(max_epochs=5, callbacks=[early_stopping])
    trainer.fit(TrainScript(), batches(2))
    assert early_stopping.stopped_epoch == 3
    assert trainer.current_epoch == 4


def test_with_validation_every_second_epoch_patience_counts_validations(make_trainer):
    early_stopping = EarlyStopping("val_metric", patience=2)
    trainer = make_trainer(max_epochs=10, val_every_n_epochs=2, callbacks=[early_stopping])
    module = TinyModule(val_script=[1.0, 1.1, 1.2, 0.1, 0.1])
    trainer.fit(module, batches(1), batches(1))
    assert module.validations == 3
    assert early_stopping.stopped_epoch == 5  # the third validation ran at the end of the sixth epoch
    assert trainer.current_epoch == 6


def test_a_validate_call_of_its_own_does_not_count(make_trainer):
    early_stopping, trainer, module = run(make_trainer, [1.0, 1.1, 1.2, 1.3, 1.4], max_epochs=2, patience=2)
    assert early_stopping.wait_count == 1
    trainer.validate(module, batches(1))
    trainer.validate(module, batches(1))
    assert module.validations == 4
    assert early_stopping.wait_count == 1
    assert early_stopping.stopping_reason is EarlyStoppingReason.NOT_STOPPED


def test_a_metric_never_logged_is_a_key_error_listing_the_logged_ones(make_trainer):
    trainer = make_trainer(callbacks=[EarlyStopping("val_acc")])
    with pytest.raises(
        KeyError, match=r"EarlyStopping monitors 'val_acc'.*Logged metrics: \['train_loss', 'val_metric'\]"
    ):
        trainer.fit(TinyModule(val_script=[1.0]), batches(1), batches(1))


def test_state_dict_round_trips():
    early_stopping = EarlyStopping("val_metric", patience=4)
    for value in (1.0, 0.5, 0.7, 0.8):
        early_stopping._evaluate(value)
    state = early_stopping.state_dict()
    assert (state["wait_count"], state["best_score"]) == (2, 0.5)
    restored = EarlyStopping("val_metric", patience=4)
    restored.load_state_dict(state)
    assert restored.state_dict() == state
    with pytest.raises(KeyError, match=r"\['best_score'\] missing"):
        restored.load_state_dict({"wait_count": 1, "stopped_epoch": 0})


def test_a_resumed_run_stops_where_the_uninterrupted_one_does(make_trainer, tmp_path):
    script = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5]
    uninterrupted, _, _ = run(make_trainer, script, patience=3)
    assert uninterrupted.stopped_epoch == 3

    first = EarlyStopping("val_metric", patience=3)
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    make_trainer(max_epochs=2, callbacks=[first, checkpoint]).fit(TinyModule(val_script=script), batches(2), batches(1))
    assert first.wait_count == 1

    resumed = EarlyStopping("val_metric", patience=3)
    module = TinyModule(val_script=script)
    module.validations = 2  # the scripted values go on where the first run left them
    trainer = make_trainer(max_epochs=len(script), callbacks=[resumed])
    trainer.fit(module, batches(2), batches(1), ckpt_path=checkpoint.last_model_path)
    assert resumed.stopped_epoch == uninterrupted.stopped_epoch
    assert resumed.state_dict() == uninterrupted.state_dict()


def test_two_early_stoppings_keep_separate_states_in_checkpoints():
    assert EarlyStopping("a").state_key != EarlyStopping("b").state_key != EarlyStopping("b", mode="max").state_key


@pytest.mark.parametrize(
    "options, error, message",
    [
        ({"mode": "best"}, ValueError, r'mode=...\) must be "min" or "max", got \'best\''),
        ({"patience": 0}, ValueError, r"patience=...\) must be a positive integer, got 0"),
        ({"min_delta": -0.1}, ValueError, r"min_delta=...\) must be a number >= 0.*got -0.1"),
        ({"stopping_threshold": "0.5"}, TypeError, r"stopping_threshold=...\) must be a number or None"),
        ({"check_on_train_epoch_end": "yes"}, TypeError, r"must be True, False or None, got 'yes'"),
    ],
)
def test_bad_arguments_are_refused(options, error, message):
    with pytest.raises(error, match=message):
        EarlyStopping("val_loss", **options)
