"""Loggers on a plain Engine (no Trainer): `attach_loggers(engine, loggers)`, Ignite-style, over the same
`TrackerRuns` lifecycle as the Trainer's `LoggerBridge`."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tracktrain.distributed.ranks import global_rank
from tracktrain.engine.engine import Engine
from tracktrain.engine.events import Events, RemovableEventHandle
from tracktrain.loggers.base import Logger
from tracktrain.loggers.runs import TrackerRuns
from tracktrain.trainer.metric_log import scalar_values, to_floats

__all__ = ["attach_loggers"]


def attach_loggers(
    engine: Engine,
    loggers: Sequence[Logger],
    root_dir: str | os.PathLike = ".",
    output_transform: Callable[[Any], Mapping[str, Any]] | None = None,
    every: int = 1,
    hyperparams: Mapping[str, Any] | None = None,
    step_transform: Callable[[Engine], int] | None = None,
) -> list[RemovableEventHandle]:
    """Log an Engine's run to `loggers` (rank 0 only): `output_transform(engine.state.output)` (a dict of
    scalars) every `every` iterations, `engine.state.metrics` at each epoch's end, at the step `step_transform`
    gives (default: the iteration); the runs start with the engine and end FINISHED, FAILED or KILLED with it.
    Returns the handles, to detach."""
    if global_rank() != 0:
        return []
    root = os.fspath(root_dir)
    step_of = step_transform or (lambda e: e.state.iteration)
    runs = TrackerRuns(loggers)

    def publish(values: Mapping[str, Any], step: int) -> None:
        scalars = scalar_values(values)
        if scalars:
            runs.log_metrics(to_floats(scalars), step)  # one host sync per publish

    def iteration(engine: Engine) -> None:
        publish(output_transform(engine.state.output), step_of(engine))  # type: ignore[misc]

    def epoch(engine: Engine) -> None:
        publish(engine.state.metrics, step_of(engine))
        runs.flush()

    def failed(engine: Engine, exception: BaseException) -> None:
        runs.finish(exception)
        raise exception

    handles = [
        engine.add_event_handler(Events.STARTED, lambda: runs.start(root, params=hyperparams or None)),
        engine.add_event_handler(Events.EPOCH_COMPLETED, epoch),
        engine.add_event_handler(Events.COMPLETED, lambda: runs.finish()),
        engine.add_event_handler(Events.EXCEPTION_RAISED, failed),
    ]
    if output_transform is not None:
        handles.append(engine.add_event_handler(Events.ITERATION_COMPLETED(every=every), iteration))
    return handles
