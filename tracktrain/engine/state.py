"""The Engine's State: counters, limits, the current batch and output, and whatever users add to it."""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping
from typing import Any

from tracktrain.engine.events import CallableEventWithFilter, Events

# Which counter each built-in event's filters look at.
CORE_EVENT_TO_ATTR: dict[Any, str] = {
    Events.GET_BATCH_STARTED: "iteration",
    Events.GET_BATCH_COMPLETED: "iteration",
    Events.ITERATION_STARTED: "iteration",
    Events.ITERATION_COMPLETED: "iteration",
    Events.EPOCH_STARTED: "epoch",
    Events.EPOCH_COMPLETED: "epoch",
    Events.STARTED: "epoch",
    Events.COMPLETED: "epoch",
}


class State:
    """State of an Engine run, shared between the process function and the handlers.

    Counters are 1-based once running: the first epoch is `epoch == 1` and the first iteration is
    `iteration == 1` (both are 0 before the run starts). `times` holds the durations of the last
    epoch and of the whole run under the keys `"EPOCH_COMPLETED"` and `"COMPLETED"`. Users may add their
    own attributes; list them in `engine.state_dict_user_keys` to have them saved with the engine.
    """

    iteration: int
    epoch: int
    epoch_length: int | None
    max_epochs: int | None
    max_iters: int | None
    output: Any
    batch: Any
    metrics: dict[str, Any]
    dataloader: Iterable[Any] | None
    seed: int | None
    times: dict[str, float | None]
    # added by the parts that use them, absent otherwise (declared for the type checker only, no default):
    scaler: Any  # create_supervised_trainer's GradScaler with amp_mode="amp"
    rng_states: Any  # DeterministicEngine's and the Trainer's saved RNG states
    param_history: dict[str, list[Any]]  # the LR-scheduler handler's values
    checkpoint: Any  # the Trainer: the checkpoint being restored
    step_loss: Any  # the Trainer: the loss of the current step, for hooks
    step_optimizer: Any  # the Trainer: the optimizer being stepped, for hooks

    # Kept for code written against Ignite, which reads State.event_to_attr; per-engine additions made by
    # register_events live on the state instance, not here, so engines never see each other's events.
    event_to_attr: Mapping[Any, str] = CORE_EVENT_TO_ATTR

    def __init__(self, **kwargs: Any) -> None:
        self.iteration = 0
        self.epoch = 0
        self.epoch_length = None
        self.max_epochs = None
        self.max_iters = None
        self.output = None
        self.batch = None
        self.metrics = {}
        self.dataloader = None
        self.seed = None
        self.times = {Events.EPOCH_COMPLETED.name: None, Events.COMPLETED.name: None}
        self.event_to_attr = dict(CORE_EVENT_TO_ATTR)
        for key, value in kwargs.items():
            setattr(self, key, value)
        self._update_attrs()

    def _update_attrs(self) -> None:
        """Create a zero counter for every event's attribute that does not exist yet."""
        for attr in self.event_to_attr.values():
            if not hasattr(self, attr):
                setattr(self, attr, 0)

    def get_event_attrib_value(self, event_name: str | CallableEventWithFilter) -> int:
        """The counter that filters on `event_name` look at (`iteration` for ITERATION_COMPLETED, ...)."""
        if event_name not in self.event_to_attr:
            raise RuntimeError(
                f"Event {event_name!r} has no counter on the state; register it with "
                "engine.register_events(..., event_to_attr={event: 'counter_name'})."
            )
        return getattr(self, self.event_to_attr[event_name])

    def __repr__(self) -> str:
        lines = ["State:"]
        for attr, value in self.__dict__.items():
            if attr == "event_to_attr":
                continue
            if not isinstance(value, (numbers.Number, str)):
                value = type(value)
            lines.append(f"\t{attr}: {value}")
        return "\n".join(lines) + "\n"
