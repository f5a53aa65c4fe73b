"""Each built-in callback attaches exactly the handlers it needs, and the Trainer removes them all after each call."""

from __future__ import annotations

from collections import Counter

import pytest
import torch.nn.functional as F

from tracktrain.callbacks.base import Callback
from tracktrain.callbacks.early_stopping import EarlyStopping
from tracktrain.callbacks.lr_monitor import LearningRateMonitor
from tracktrain.callbacks.memory import MemoryMonitor
from tracktrain.callbacks.metric_printer import MetricPrinter
from tracktrain.callbacks.metric_tracking import AccuracyTracker, LossTracker
from tracktrain.callbacks.timing import Timing
from tracktrain.trainer.hooks import overridden_hooks

from .conftest import TinyModule, batches

ENGINES = ("train_engine", "eval_engine", "test_engine")


def handler_counts(trainer) -> dict[str, Counter]:
    """The number of handlers of each event on each engine (events without any left out)."""
    return {
        engine: Counter(
            {event: len(records) for event, records in getattr(trainer, engine)._event_handlers.items() if records}
        )
        for engine in ENGINES
    }


class Census(Callback):
    """Counts the handlers on every engine at the end of training and at the end of a test run."""

    def __init__(self) -> None:
        self.counts: dict[str, Counter] = {}

    def _take(self, trainer) -> None:
        self.counts = handler_counts(trainer)

    def on_train_end(self, trainer, module) -> None:
        self._take(trainer)

    def on_test_end(self, trainer, module) -> None:
        self._take(trainer)


def census(make_trainer, callbacks: list[Callback], validate: bool, repeats: int = 1) -> list[dict[str, Counter]]:
    """The handler counts during a fit (then during a test run) with `callbacks`; fits `repeats` times."""
    probe = Census()
    trainer = make_trainer(max_epochs=1, callbacks=[*callbacks, probe])
    module = TinyModule()
    taken = []
    for _ in range(repeats):
        trainer.fit(module, batches(1), batches(1) if validate else None)
        taken.append(probe.counts)
    trainer.test(module, batches(1))
    taken.append(probe.counts)
    assert handler_counts(trainer) == {engine: Counter() for engine in ENGINES}  # nothing left after fit() and test()
    return taken


CASES = [
    # (callback, fit with validation, hooks it overrides, handlers added during fit, handlers added during test)
    (LearningRateMonitor("epoch"), False, [], {"train_engine": {"STARTED": 1, "EPOCH_STARTED": 1}}, {}),
    (LearningRateMonitor("step"), False, [], {"train_engine": {"STARTED": 1, "ITERATION_STARTED": 1}}, {}),
    (
        LearningRateMonitor(),
        False,
        [],
        {"train_engine": {"STARTED": 1, "ITERATION_STARTED": 1, "EPOCH_STARTED": 1}},
        {},
    ),
    (EarlyStopping("val_loss"), True, [], {"eval_engine": {"COMPLETED": 1}}, {}),
    (EarlyStopping("train_loss"), False, [], {"train_engine": {"EPOCH_COMPLETED": 1}}, {}),
    (
        MetricPrinter(),
        True,
        [
            "on_train_epoch_start",
            "on_train_epoch_end",
            "on_validation_start",
            "on_validation_end",
            "on_test_start",
            "on_test_end",
        ],
        {"train_engine": {"EPOCH_STARTED": 1, "EPOCH_COMPLETED": 1}, "eval_engine": {"STARTED": 1, "COMPLETED": 1}},
        {"test_engine": {"STARTED": 1, "COMPLETED": 1}},
    ),
    (
        Timing(),
        True,
        [
            "on_train_epoch_start",
            "on_train_batch_start",
            "on_train_batch_end",
            "on_train_epoch_end",
            "on_validation_start",
            "on_validation_end",
        ],
        {
            "train_engine": {
                "EPOCH_STARTED": 1,
                "ITERATION_STARTED": 1,
                "ITERATION_COMPLETED": 1,
                "EPOCH_COMPLETED": 1,
            },
            "eval_engine": {"STARTED": 1, "COMPLETED": 1},
        },
        {},
    ),
    (MemoryMonitor(), False, [], {"train_engine": {"EPOCH_COMPLETED": 1}}, {}),
    (MemoryMonitor(logging_interval="step"), False, [], {"train_engine": {"STARTED": 1, "ITERATION_COMPLETED": 1}}, {}),
    (
        LossTracker(),
        True,
        [],
        {"train_engine": {"EPOCH_STARTED": 1, "ITERATION_COMPLETED": 1, "EPOCH_COMPLETED": 1}},
        {},
    ),
    (
        LossTracker(F.cross_entropy),
        True,
        [],
        {
            "train_engine": {"EPOCH_STARTED": 1, "ITERATION_COMPLETED": 1, "EPOCH_COMPLETED": 1},
            "eval_engine": {"EPOCH_STARTED": 1, "ITERATION_COMPLETED": 1, "EPOCH_COMPLETED": 1},
        },
        {"test_engine": {"EPOCH_STARTED": 1, "ITERATION_COMPLETED": 1, "EPOCH_COMPLETED": 1}},
    ),
    (
        AccuracyTracker(),
        True,
        [],
        {"eval_engine": {"EPOCH_STARTED": 1, "ITERATION_COMPLETED": 1, "EPOCH_COMPLETED": 1}},
        {"test_engine": {"EPOCH_STARTED": 1, "ITERATION_COMPLETED": 1, "EPOCH_COMPLETED": 1}},
    ),
]


@pytest.mark.parametrize(
    "callback, validate, hooks, during_fit, during_test",
    CASES,
    ids=lambda value: type(value).__name__ if isinstance(value, Callback) else None,
)
def test_only_the_needed_handlers_are_attached(make_trainer, callback, validate, hooks, during_fit, during_test):
    assert sorted(overridden_hooks(callback, Callback)) == sorted(hooks)
    baseline_fit, baseline_test = census(make_trainer, [], validate)
    with_fit, with_test = census(make_trainer, [callback], validate)
    for baseline, counted, expected in ((baseline_fit, with_fit, during_fit), (baseline_test, with_test, during_test)):
        added = {engine: dict(counted[engine] - baseline[engine]) for engine in ENGINES}
        assert added == {engine: expected.get(engine, {}) for engine in ENGINES}
        assert all(not (baseline[engine] - counted[engine]) for engine in ENGINES)


def test_repeated_fits_never_attach_twice(make_trainer):
    callbacks = [
        LossTracker(F.cross_entropy),
        AccuracyTracker(),
        Timing(),
        MetricPrinter(),
        EarlyStopping("val_loss"),
        LearningRateMonitor(),
        MemoryMonitor(),
    ]
    first, second, third, _ = census(make_trainer, callbacks, validate=True, repeats=3)
    assert first == second == third
