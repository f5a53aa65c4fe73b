"""Metric usages: which Engine events reset, update and compute a metric (Ignite's MetricUsage family)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tracktrain.engine.events import CallableEventWithFilter, Events

__all__ = [
    "BatchWise",
    "EpochWise",
    "MetricUsage",
    "RunningBatchWise",
    "RunningEpochWise",
    "SingleEpochRunningBatchWise",
]


class MetricUsage:
    """When an attached metric resets (`STARTED`), updates (`ITERATION_COMPLETED`) and writes its value into
    `engine.state.metrics` (`COMPLETED`)."""

    usage_name: str = "custom"

    def __init__(self, started: Any, completed: Any, iteration_completed: CallableEventWithFilter) -> None:
        self._started = started
        self._completed = completed
        self._iteration_completed = iteration_completed

    @property
    def STARTED(self) -> Any:
        return self._started

    @property
    def COMPLETED(self) -> Any:
        return self._completed

    @property
    def ITERATION_COMPLETED(self) -> CallableEventWithFilter:
        return self._iteration_completed

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class EpochWise(MetricUsage):
    """The default: reset on EPOCH_STARTED, update on ITERATION_COMPLETED, compute on EPOCH_COMPLETED."""

    usage_name = "epoch_wise"

    def __init__(self) -> None:
        super().__init__(Events.EPOCH_STARTED, Events.EPOCH_COMPLETED, Events.ITERATION_COMPLETED)


class RunningEpochWise(EpochWise):
    """Reset once on STARTED, update and compute on EPOCH_COMPLETED: a running measure over epochs, e.g. a
    RunningAverage of a metric computed once per epoch."""

    usage_name = "running_epoch_wise"

    def __init__(self) -> None:
        MetricUsage.__init__(self, Events.STARTED, Events.EPOCH_COMPLETED, Events.EPOCH_COMPLETED)


class BatchWise(MetricUsage):
    """Reset on ITERATION_STARTED, update and compute on ITERATION_COMPLETED: the value of each batch alone.
    compute() then runs (and reads its value back to the host) once per iteration."""

    usage_name = "batch_wise"

    def __init__(self) -> None:
        super().__init__(Events.ITERATION_STARTED, Events.ITERATION_COMPLETED, Events.ITERATION_COMPLETED)


class RunningBatchWise(BatchWise):
    """Reset once on STARTED, update and compute on every ITERATION_COMPLETED (RunningAverage's default)."""

    usage_name = "running_batch_wise"

    def __init__(self) -> None:
        MetricUsage.__init__(self, Events.STARTED, Events.ITERATION_COMPLETED, Events.ITERATION_COMPLETED)


class SingleEpochRunningBatchWise(BatchWise):
    """Like RunningBatchWise, but reset at every EPOCH_STARTED."""

    usage_name = "single_epoch_running_batch_wise"

    def __init__(self) -> None:
        MetricUsage.__init__(self, Events.EPOCH_STARTED, Events.ITERATION_COMPLETED, Events.ITERATION_COMPLETED)


# each built-in usage is built without arguments (MetricUsage itself takes the events)
_USAGES_BY_NAME: dict[str, Callable[[], MetricUsage]] = {
    cls.usage_name: cls
    for cls in (EpochWise, RunningEpochWise, BatchWise, RunningBatchWise, SingleEpochRunningBatchWise)
}


def same_events(a: MetricUsage, b: MetricUsage) -> bool:
    return (a.STARTED, a.ITERATION_COMPLETED, a.COMPLETED) == (b.STARTED, b.ITERATION_COMPLETED, b.COMPLETED)


def as_usage(usage: str | MetricUsage) -> MetricUsage:
    if isinstance(usage, MetricUsage):
        return usage
    if isinstance(usage, str):
        usage_cls = _USAGES_BY_NAME.get(usage)
        if usage_cls is None:
            raise ValueError(
                "Argument usage should be '(Running)EpochWise.usage_name' or "
                f"'((SingleEpoch)Running)BatchWise.usage_name', got {usage}. Use one of {sorted(_USAGES_BY_NAME)} "
                "or a MetricUsage."
            )
        return usage_cls()
    raise TypeError(
        f"Unhandled usage type {type(usage)}: usage must be a MetricUsage or one of {sorted(_USAGES_BY_NAME)}, "
        f"got {usage!r}."
    )


# ------------------------------------------------------------------------------------------------- distributed
