"""Timing against a module whose steps sleep a known time.

No assert depends on how fast the machine is: each reported time holds at least the sleeps inside it and at most the
wall time that `Clock` measures around the same span (what must be left out of a span is then outside that wall)."""

from __future__ import annotations

import time
from time import perf_counter
from typing import Any

import pytest
import torch

from tracktrain.callbacks.base import Callback, CallbackPhase
from tracktrain.callbacks.timing import Timing
from tracktrain.handlers.multi_timer import MultiTimer
from tracktrain.trainer.batches import batch_size_of as _batch_size

from .conftest import TinyModule, batches, logged_messages

TRAIN_SLEEP = 0.02
VAL_SLEEP = 0.1


class SleepyModule(TinyModule):
    def train_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        time.sleep(TRAIN_SLEEP)
        return super().train_step(batch, batch_idx)

    def eval_step(self, batch: Any, batch_idx: int) -> Any:
        time.sleep(VAL_SLEEP)
        return super().eval_step(batch, batch_idx)


class Clock:
    """Wall time around Timing's spans: `Open` reads the clock before Timing starts an epoch or a validation (it
    runs FIRST), `Close` after Timing stops it (given after Timing, in Timing's METRICS phase) and before the epoch's
    validation starts. Their differences are `epochs` and `validations`, the spans in which Timing's must fit."""

    def __init__(self) -> None:
        self.epochs: list[float] = []
        self.validations: list[float] = []
        clock = self

        class Open(Callback):
            phase = CallbackPhase.FIRST

            def on_train_epoch_start(self, trainer, module):
                clock._epoch = perf_counter()

            def on_validation_start(self, trainer, module):
                clock._validation = perf_counter()

        class Close(Callback):
            phase = CallbackPhase.METRICS

            def on_train_epoch_end(self, trainer, module):
                clock.epochs.append(perf_counter() - clock._epoch)

            def on_validation_end(self, trainer, module):
                if not trainer.sanity_checking:  # Timing does not time the sanity check either
                    clock.validations.append(perf_counter() - clock._validation)

        self.callbacks = [Open(), Close()]


def test_epoch_step_validation_seconds_and_throughput(make_trainer, dist_logger, tmp_path):
    timer, clock = MultiTimer(), Clock()
    trainer = make_trainer(max_epochs=2, callbacks=[Timing(dist_logger, timer), *clock.callbacks])
    trainer.fit(SleepyModule(), batches(4, batch_size=8), batches(2))
    recorded = trainer.recorder
    epochs, step_means = recorded.values_of("time/epoch"), recorded.values_of("time/step_mean")
    throughputs, validations = recorded.values_of("throughput/samples_per_sec"), recorded.values_of("time/validation")
    assert len(epochs) == len(step_means) == len(throughputs) == len(validations) == len(clock.epochs) == 2
    for epoch, step_mean, throughput, around in zip(epochs, step_means, throughputs, clock.epochs):
        assert 4 * TRAIN_SLEEP <= epoch <= around  # the epoch's validation, after `around` ends, is not in it
        assert TRAIN_SLEEP <= step_mean <= epoch / 4
        assert throughput == pytest.approx(32 / epoch, rel=1e-12)  # 4 batches of 8 samples
    assert len(clock.validations) == 2
    assert all(2 * VAL_SLEEP <= seconds <= around for seconds, around in zip(validations, clock.validations))

    # the timer holds the same numbers: every step and epoch in its history
    step_watch, epoch_watch = timer.get_timer("train-step"), timer.get_timer("train-epoch")
    assert step_watch.history_count == 8 and epoch_watch.history_count == 2
    assert epoch_watch.get_history_sum() == pytest.approx(sum(epochs), rel=1e-12)
    assert step_watch.get_history_mean() == pytest.approx(sum(step_means) / 2, rel=1e-12)
    assert float(trainer.callback_metrics["time/epoch"]) == epochs[-1]

    messages = logged_messages(tmp_path / "logs" / "rank_0.log")
    assert [message.split(" | ")[0] for message in messages] == ["Epoch 1", "Validation", "Epoch 2", "Validation"]
    assert messages[0].split(" | ")[1:] == [
        f"time/epoch={epochs[0]:.4f}",
        f"time/step_mean={step_means[0]:.4f}",
        f"throughput/samples_per_sec={throughputs[0]:.4f}",
    ]


def test_validations_within_the_epoch_are_not_epoch_time(make_trainer):
    timing, clock = Timing(), Clock()
    trainer = make_trainer(max_epochs=1, val_check_interval=2, callbacks=[timing, *clock.callbacks])
    trainer.fit(SleepyModule(), batches(4), batches(1))
    [epoch], validations = trainer.recorder.values_of("time/epoch"), trainer.recorder.values_of("time/validation")
    [around] = clock.epochs  # from before the epoch started to after it ended, its 2 validations included
    assert len(validations) == 2 == len(clock.validations)
    assert all(VAL_SLEEP <= seconds <= outer for seconds, outer in zip(validations, clock.validations))
    # the epoch's 4 sleeps, and not the 2 validations' sleeps that ran inside its span
    assert 4 * TRAIN_SLEEP <= epoch <= around - 2 * VAL_SLEEP
    assert timing.timer.get_timer("train-epoch").get_elapsed_time() == pytest.approx(epoch + sum(validations))


class StopAtStep3(Callback):
    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == 3:
            trainer.train_engine.terminate()  # the run ends here: the epoch never completes


def test_a_run_stopped_mid_epoch_leaves_nothing_running_for_the_next(make_trainer):
    timing = Timing()
    make_trainer(max_epochs=2, callbacks=[timing, StopAtStep3()]).fit(TinyModule(), batches(2))
    assert timing.timer.get_timer("train-epoch").is_running  # the second epoch never completed
    trainer = make_trainer(max_epochs=1, callbacks=[timing])
    trainer.fit(TinyModule(), batches(3))
    assert trainer.recorder.values_of("throughput/samples_per_sec")[0] > 0
    assert timing.timer.get_timer("train-step").history_count == 6  # 3 + 3 steps, the dropped epoch's included


def test_a_timer_switched_off_reports_nothing(make_trainer):
    trainer = make_trainer(max_epochs=1, callbacks=[Timing(timer=MultiTimer(on=False))])
    trainer.fit(TinyModule(), batches(2), batches(1))
    assert not any(name.startswith(("time/", "throughput/")) for name in trainer.callback_metrics)


def test_batch_size_is_the_first_tensors_length():
    x = torch.zeros(5, 3)
    assert _batch_size(x) == 5
    assert _batch_size((x, torch.zeros(7))) == 5
    assert _batch_size({"meta": "id", "inputs": {"image": torch.zeros(4, 2)}, "y": x}) == 4
    assert _batch_size(["text", 3]) == 1
    assert _batch_size(torch.tensor(2.0)) == 1
    assert _batch_size([torch.zeros(3, 2), x]) == 3 and _batch_size((torch.tensor(2.0), x)) == 1  # the fast path
    assert _batch_size(()) == 1 and _batch_size(("id", x)) == 5


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError, match=r"Timing\(timer=...\) takes a tracktrain.handlers.multi_timer.MultiTimer"):
        Timing(timer=time.perf_counter)
    with pytest.raises(TypeError, match=r"Timing\(logger=...\) takes a DistributedLogger"):
        Timing(logger=print)
