"""Events of the Engine, their filters (`every`, `once`, `before`/`after`, custom) and handler handles.

The names, values and comparison rules follow PyTorch-Ignite so that code written for Ignite keeps its
meaning: an event compares equal to any filtered version of itself and to its name as a string.
"""

from __future__ import annotations

import numbers
import weakref
from collections.abc import Callable, Iterator, Sequence
from enum import Enum
from types import DynamicClassAttribute
from typing import Any, Protocol

from tracktrain.engine.signature import check_signature

# `f(engine, counter) -> bool`: whether a handler runs at this value of its event's counter
EventFilter = Callable[[Any, int], bool]

__all__ = [
    "CallableEventWithFilter",
    "EventEnum",
    "Events",
    "EventsList",
    "RemovableEventHandle",
]


class CallableEventWithFilter:
    """An event, optionally carrying a filter that decides, from the event's counter, whether a handler runs.

    Calling an event (`Events.ITERATION_COMPLETED(every=10)`) returns a new, filtered event of the same name.
    Filtered and unfiltered versions compare and hash by name, so `has_event_handler` and
    `remove_event_handler` find handlers whichever version was used.
    """

    def __init__(self, value: str, event_filter: EventFilter | None = None, name: str | None = None) -> None:
        self.filter = event_filter
        if not hasattr(self, "_value_"):
            self._value_ = value
        if not hasattr(self, "_name_") and name is not None:
            self._name_ = name

    # DynamicClassAttribute: an attribute on members, while `Events.name` on the Enum class stays free.
    @DynamicClassAttribute
    def name(self) -> str:
        return self._name_

    @DynamicClassAttribute
    def value(self) -> str:
        return self._value_

    def __call__(
        self,
        event_filter: EventFilter | None = None,
        every: int | None = None,
        once: int | Sequence[int] | None = None,
        before: int | None = None,
        after: int | None = None,
    ) -> CallableEventWithFilter:
        """Return this event with a filter.

        - `every=n`: every n-th event (combinable with `before`/`after`);
        - `once=n` or `once=[n1, n2, ...]`: only at these counter values;
        - `before=b`, `after=a`: only while `a < counter < b` (both exclusive);
        - `event_filter=f`: `f(engine, counter) -> bool`.
        """
        has_range = before is not None or after is not None
        # Each message starts with Ignite's words (users and their tests match on them), then says ours.
        only_one = "Only one of the input arguments should be specified, except before, after and every"
        if event_filter is not None and (every is not None or once is not None or has_range):
            raise ValueError(
                f"{only_one}: {self.name}(...) cannot combine event_filter with every/once/before/after; fold "
                "the extra condition into the event_filter function."
            )
        if every is not None and once is not None:
            raise ValueError(f"{only_one}: {self.name}(...) got every={every!r} and once={once!r}; pass one.")
        if once is not None and has_range:
            raise ValueError(
                f"{only_one}: {self.name}(...) got once={once!r} with before/after; once already names the "
                "exact counter values."
            )
        if event_filter is None and every is None and once is None and not has_range:
            raise ValueError(
                f"{only_one}: {self.name}() was called without a filter; pass one of every=, once=, "
                f"before=/after= or event_filter=, or use {self.name} without calling it."
            )
        if event_filter is not None and not callable(event_filter):
            raise TypeError(
                f"Argument event_filter should be a callable: {self.name}(event_filter=...) got {event_filter!r}."
            )
        if every is not None and not (_is_int(every) and every > 0):
            raise ValueError(
                f"Argument every should be integer and greater than zero: {self.name}(every=...) got {every!r}."
            )
        once_values: frozenset[int] | None = None
        if once is not None:
            # `object`: callers may pass anything here; the check below narrows it to a sequence of ints.
            once_given: object = [once] if _is_int(once) else once
            if not (
                isinstance(once_given, Sequence)
                and len(once_given) > 0
                and all(_is_int(v) and v > 0 for v in once_given)
            ):
                raise ValueError(
                    "Argument once should either be a positive integer or a list of positive integers, "
                    f"got {once}: pass {self.name}(once=n) or {self.name}(once=[n1, n2, ...]) with n >= 1."
                )
            once_values = frozenset(once_given)
        for arg_name, arg in (("before", before), ("after", after)):
            if arg is not None and not (_is_int(arg) and arg >= 0):
                raise ValueError(
                    f"Argument {arg_name} should be integer and greater or equal to zero: "
                    f"{self.name}({arg_name}=...) got {arg!r}."
                )

        if once_values is not None:
            event_filter = _once_filter(once_values)
        elif has_range:
            event_filter = _range_filter(every, before, after)
        elif every is not None:
            if every == 1:  # every single event: no filter at all, so the handler costs nothing extra
                return CallableEventWithFilter(self.value, None, self.name)
            event_filter = _every_filter(every)
        else:
            assert event_filter is not None  # the call with no filter at all raised above
            check_signature(event_filter, "event_filter", ("engine", "event"))
        return CallableEventWithFilter(self.value, event_filter, self.name)

    def __or__(self, other: Any) -> EventsList:
        return EventsList() | self | other

    def __hash__(self) -> int:
        return hash(self._name_)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CallableEventWithFilter):
            return self.name == other.name
        if isinstance(other, str):
            return self.name == other
        return NotImplemented

    def __repr__(self) -> str:
        if self.filter is None:
            return f"<event={self.name}>"
        return f"<event={self.name}, filter={self.filter!r}>"

    __str__ = __repr__


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


class _every_filter:
    """True on every n-th counter value. A class rather than a closure so it has a readable repr."""

    __slots__ = ("every",)

    def __init__(self, every: int) -> None:
        self.every = every

    def __call__(self, engine: Any, counter: int) -> bool:
        return counter % self.every == 0

    def __repr__(self) -> str:
        return f"every={self.every}"


class _once_filter:
    __slots__ = ("values",)

    def __init__(self, values: frozenset[int]) -> None:
        self.values = values

    def __call__(self, engine: Any, counter: int) -> bool:
        return counter in self.values

    def __repr__(self) -> str:
        return f"once={sorted(self.values)}"


class _range_filter:
    """`after < counter < before` (both exclusive; `after` defaults to 0), and with `every`, every `every`-th
    event starting with the first one after `after` (Ignite's rule: `every=3, after=2` fires at 3, 6, 9)."""

    __slots__ = ("every", "before", "after")

    def __init__(self, every: int | None, before: int | None, after: int | None) -> None:
        self.every = 1 if every is None else every
        self.before = float("inf") if before is None else before
        self.after = 0 if after is None else after

    def __call__(self, engine: Any, counter: int) -> bool:
        return self.after < counter < self.before and (counter - self.after - 1) % self.every == 0

    def __repr__(self) -> str:
        return f"every={self.every}, after={self.after}, before={self.before}"


class EventEnum(CallableEventWithFilter, Enum):
    """Base class for custom events; members are callable to add filters, like the built-in `Events`.

    .. code-block:: python

        class BackpropEvents(EventEnum):
            BACKWARD_STARTED = "backward_started"
            BACKWARD_COMPLETED = "backward_completed"


        engine.register_events(*BackpropEvents, event_to_attr={BackpropEvents.BACKWARD_STARTED: "backward"})
    """

    def __new__(cls, value: str) -> EventEnum:
        member = CallableEventWithFilter.__new__(cls)
        member._value_ = value
        return member

    # Enum would otherwise compare members by identity; keep the by-name rule of CallableEventWithFilter.
    __hash__ = CallableEventWithFilter.__hash__
    __eq__ = CallableEventWithFilter.__eq__


class Events(EventEnum):
    """The events every Engine fires, in the order that `tracktrain.engine.engine` describes."""

    EPOCH_STARTED = "epoch_started"
    EPOCH_COMPLETED = "epoch_completed"
    STARTED = "started"
    COMPLETED = "completed"
    ITERATION_STARTED = "iteration_started"
    ITERATION_COMPLETED = "iteration_completed"
    EXCEPTION_RAISED = "exception_raised"
    GET_BATCH_STARTED = "get_batch_started"
    GET_BATCH_COMPLETED = "get_batch_completed"
    DATALOADER_STOP_ITERATION = "dataloader_stop_iteration"
    TERMINATE = "terminate"
    TERMINATE_SINGLE_EPOCH = "terminate_single_epoch"
    INTERRUPT = "interrupt"

    def __or__(self, other: Any) -> EventsList:
        return EventsList() | self | other


class EventsList:
    """Several events for one handler: `Events.STARTED | Events.EPOCH_COMPLETED(every=2)`."""

    def __init__(self) -> None:
        self._events: list[CallableEventWithFilter] = []

    def _append(self, event: Any) -> None:
        if not isinstance(event, CallableEventWithFilter):
            raise TypeError(
                f"Only events can be combined with '|', got {event!r} of type {type(event).__name__}; "
                "use members of Events or of your EventEnum."
            )
        self._events.append(event)

    def __getitem__(self, item: int) -> CallableEventWithFilter:
        return self._events[item]

    def __iter__(self) -> Iterator[CallableEventWithFilter]:
        return iter(self._events)

    def __len__(self) -> int:
        return len(self._events)

    def __or__(self, other: Any) -> EventsList:
        self._append(other)
        return self

    def __repr__(self) -> str:
        return "EventsList(" + " | ".join(map(repr, self._events)) + ")"


class HandlerOwner(Protocol):
    """What a `RemovableEventHandle` needs of its engine (an `Engine`: it imports this module, not the reverse)."""

    def has_event_handler(self, handler: Callable, event_name: Any | None = None) -> bool: ...

    def remove_event_handler(self, handler: Callable, event_name: Any) -> None: ...


class RemovableEventHandle:
    """Removes one handler from its engine; returned by `Engine.add_event_handler`.

    Holds only weak references, so keeping a handle alive keeps neither the engine nor the handler alive.
    Use it as a context manager to attach a handler for the duration of a block.
    """

    def __init__(self, event_name: Any, handler: Callable, engine: HandlerOwner) -> None:
        self.event_name = event_name
        self.handler = weakref.ref(handler)
        self.engine = weakref.ref(engine)

    def remove(self) -> None:
        """Remove the handler from the engine; does nothing if either is gone or it was already removed."""
        handler = self.handler()
        engine = self.engine()
        if handler is None or engine is None:
            return
        events = self.event_name if isinstance(self.event_name, EventsList) else [self.event_name]
        for event in events:
            if engine.has_event_handler(handler, event):
                engine.remove_event_handler(handler, event)

    def __enter__(self) -> RemovableEventHandle:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.remove()
