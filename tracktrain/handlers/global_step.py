"""`global_step_from_engine`: log an evaluator's results against the trainer's epoch or iteration."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tracktrain.engine.engine import Engine

__all__ = ["global_step_from_engine"]


def global_step_from_engine(
    engine: Engine, custom_event_name: Any | None = None, fallback_attr: str = "epoch"
) -> Callable[[Any, Any], int]:
    """Return `global_step_transform(engine_, event_name) -> int` that reads the step from `engine`'s state.

    Handlers attached to an evaluator (a checkpoint, a logger) get called with the evaluator, but their
    results belong on the trainer's timeline: this reads the counter of `event_name` (or of
    `custom_event_name`, when given) from `engine` instead. An event with no counter on `engine.state`
    falls back to `engine.state.<fallback_attr>`, as in Ignite.

    .. code-block:: python

        handler = Checkpoint(..., global_step_transform=global_step_from_engine(trainer))
        evaluator.add_event_handler(Events.COMPLETED, handler)  # saved under the trainer's epoch
    """
    if not isinstance(engine, Engine):
        raise TypeError(
            f"global_step_from_engine needs the Engine whose counters give the step (usually the trainer), "
            f"got {engine!r} of type {type(engine).__name__}."
        )
    if not isinstance(fallback_attr, str):
        raise TypeError(f"fallback_attr must be the name of a State attribute, got {fallback_attr!r}.")

    def global_step_transform(_: Any, event_name: Any) -> int:
        event = custom_event_name if custom_event_name is not None else event_name
        # the engine's own table, so events registered on it with event_to_attr are found too
        if event not in engine.state.event_to_attr:
            return getattr(engine.state, fallback_attr)
        return engine.state.get_event_attrib_value(event)

    return global_step_transform
