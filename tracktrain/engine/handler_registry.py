"""The Engine's handler registry: which events an engine allows, and the handlers attached to each.

All the work of attaching a handler happens here, once: the event is checked, its filter's counter looked up
and the handler's call convention decided from its signature. What is stored is a plain record per handler in
a `dict[event name, list[record]]`, so that firing an event (`Engine._fire`) walks one list and inspects
nothing. The registry holds no reference to its engine: the engine is passed in where a call needs it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tracktrain.engine.events import CallableEventWithFilter, EventEnum
from tracktrain.engine.signature import accepts, check_signature
from tracktrain.engine.state import State

__all__ = ["HandlerRecord", "HandlerRegistry", "event_key"]


# One attached handler: (handler, pass_engine, args, kwargs, event_filter, counter_attr, takes_event_kwargs). A plain
# tuple, not a NamedTuple: the hot path unpacks it, and only an exact tuple unpacks without the iterator protocol
# (a NamedTuple costs ~0.03 µs more per handler call).
HandlerRecord = tuple[Callable, bool, tuple, dict, Any, Any, bool]


def event_key(event: Any) -> str:
    """Handlers are stored by event name: events compare equal to their filtered versions and to their name."""
    return event.name if isinstance(event, CallableEventWithFilter) else event


class HandlerRegistry:
    """The allowed events of one engine (`allowed_events`: name -> event) and its handlers (`handlers`: name ->
    records, in the order they were attached).

    `handlers` is never edited in place while it may be walked: removing a handler puts a new list under the
    event's name, so an event being fired right now still calls every handler it had.
    """

    def __init__(self) -> None:
        self.handlers: dict[str, list[HandlerRecord]] = {}
        self.allowed_events: dict[str, Any] = {}
        # id(wrapper) -> (wrapper, the handler it wraps, who wrapped it): see `wrap`
        self._wrapped: dict[int, tuple[Callable, Callable, Any]] = {}

    def _original(self, handler: Callable) -> Callable:
        """The handler the user attached, under however many wrappers."""
        entry = self._wrapped.get(id(handler))
        while entry is not None and entry[0] is handler:
            handler = entry[1]
            entry = self._wrapped.get(id(handler))
        return handler

    def _wrapped_by(self, handler: Callable, owner: Any) -> bool:
        entry = self._wrapped.get(id(handler))
        while entry is not None and entry[0] is handler:
            if entry[2] is owner:
                return True
            handler = entry[1]
            entry = self._wrapped.get(id(handler))
        return False

    def wrap(self, wrapper: Callable[[str, Callable], Callable], owner: Any) -> Callable[[], None]:
        """Put `wrapper(event name, handler)` in the place of every handler attached now that `owner` has not wrapped
        yet, called as the handler was; returns the function that takes these wrappers off again. `has` and `remove`
        still find a wrapped handler by itself."""
        wrappers: dict[int, Callable] = {}
        for key, records in self.handlers.items():
            replaced = []
            for record in records:
                if self._wrapped_by(record[0], owner):
                    replaced.append(record)
                    continue
                wrapped = wrapper(key, record[0])
                self._wrapped[id(wrapped)] = (wrapped, record[0], owner)
                wrappers[id(wrapped)] = wrapped
                replaced.append((wrapped, *record[1:]))
            self.handlers[key] = replaced  # a new list: an event being fired goes on with the one it has

        def unwrap() -> None:
            """Take ours off where they are outermost; one inside another owner's wrapper stays (its owner's
            wrapper calls it), as does its entry, so the handler under it is still found by itself."""
            for key, records in self.handlers.items():
                self.handlers[key] = [
                    (self._wrapped.pop(id(record[0]))[1], *record[1:])
                    if wrappers.get(id(record[0])) is record[0]
                    else record
                    for record in records
                ]

        return unwrap

    def register(self, event_names: Iterable[Any], event_to_attr: Any, state: State) -> None:
        """Allow `event_names`; `event_to_attr` (a mapping or None) names the counter on `state` that each
        one's filters use. Creating the counters on `state` is left to the caller."""
        if event_to_attr is not None and not isinstance(event_to_attr, Mapping):
            raise ValueError(
                f"Expected event_to_attr to be dictionary. Got {type(event_to_attr)}. Pass a dict mapping each "
                f"event to the name of its counter on engine.state (got {event_to_attr!r})."
            )
        for index, event in enumerate(event_names):
            if not isinstance(event, (str, EventEnum)):
                raise TypeError(
                    f"Value at {index} of event_names should be a str or EventEnum, but given {event}. Pass the "
                    "members of an EventEnum subclass, or their names."
                )
            self.allowed_events[event_key(event)] = event
            if event_to_attr and event in event_to_attr:
                # State.__init__ gives each state its own dict; the class-level Mapping is Ignite's shared default.
                assert isinstance(state.event_to_attr, dict)
                state.event_to_attr[event] = event_to_attr[event]

    def is_registered(self, event: Any) -> bool:
        return event_key(event) in self.allowed_events

    def allowed_key(self, event: Any, engine: Any) -> str:
        """The key of `event`, which must be allowed on `engine` (named in the error)."""
        key = event_key(event)
        if not isinstance(key, str) or key not in self.allowed_events:
            raise ValueError(
                f"Event {event} is not a valid event for this {type(engine).__name__}. Use a member of Events, "
                "or register your own first with engine.register_events(...)."
            )
        return key

    def attach(self, engine: Any, event_name: Any, handler: Callable, args: tuple, kwargs: dict) -> None:
        """Attach `handler` to one event (not a list of events) of `engine`, to be called with `args`/`kwargs`."""
        if not callable(handler):
            raise TypeError(f"{handler!r} is not a callable object: a handler for {event_name!r} must be callable.")
        key = self.allowed_key(event_name, engine)

        event_filter = getattr(event_name, "filter", None)
        counter_attr = None
        if event_filter is not None:
            counter_attr = engine.state.event_to_attr.get(key)
            if counter_attr is None:
                raise ValueError(
                    f"Cannot filter {event_name!r}: the event has no counter on engine.state to filter on. "
                    f"For a custom event, register it with engine.register_events(..., "
                    f"event_to_attr={{event: 'counter_name'}}) and increment that counter before firing it."
                )

        pass_engine, takes_event_kwargs = self.call_convention(engine, key, handler, args, kwargs)
        record: HandlerRecord = (handler, pass_engine, args, kwargs, event_filter, counter_attr, takes_event_kwargs)
        self.handlers.setdefault(key, []).append(record)

    @staticmethod
    def call_convention(engine: Any, key: str, handler: Callable, args: tuple, kwargs: dict) -> tuple[bool, bool]:
        """How to call `handler`: (with the engine first?, with the event's keyword arguments?).

        Decided once here, from the signature, so firing never inspects it. The engine-first form wins when
        both bind, as in Ignite. TERMINATE_SINGLE_EPOCH passes `iter_counter=`; handlers without that
        parameter are called without it.
        """
        event_args: tuple = (Exception(),) if key == "EXCEPTION_RAISED" else ()
        event_kwargs = {"iter_counter": 0} if key == "TERMINATE_SINGLE_EPOCH" else {}
        conventions = (
            [(True, True), (False, True), (True, False), (False, False)]
            if event_kwargs
            else [(True, True), (False, True)]
        )
        for pass_engine, with_event_kwargs in conventions:
            lead = (engine, *event_args) if pass_engine else event_args
            extra = event_kwargs if with_event_kwargs else {}
            if accepts(handler, *lead, *args, **kwargs, **extra):
                return pass_engine, with_event_kwargs
        check_signature(
            handler,
            "handler",
            (*event_args, *args),
            kwargs,
            hint="A handler is called with the engine first when its signature allows it, else without; "
            "change its signature to accept one of these.",
        )
        raise AssertionError("unreachable")  # pragma: no cover

    def has(self, handler: Callable, event_name: Any | None = None) -> bool:
        """Whether `handler` is attached to `event_name` (to any event when None), filtered or not."""
        keys = [event_key(event_name)] if event_name is not None else list(self.handlers)
        return any(self._original(record[0]) == handler for key in keys for record in self.handlers.get(key, ()))

    def remove(self, handler: Callable, event_name: Any) -> None:
        """Detach `handler` from `event_name`; raises ValueError if it was not attached there."""
        key = event_key(event_name)
        if key not in self.handlers:
            raise ValueError(
                f"Input event name '{event_name}' does not exist: no handler is attached to it on this engine."
            )
        records = self.handlers[key]
        kept = [record for record in records if self._original(record[0]) != handler]
        if len(kept) == len(records):
            raise ValueError(
                f"Input handler '{handler}' is not found among registered event handlers of {event_name!r}."
            )
        # A new list, not an in-place edit: an event being fired right now still calls every handler it had.
        self.handlers[key] = kept
