"""The Engine: an event loop over data with PyTorch-Ignite's semantics and less overhead per iteration.

`Engine` is the public class; its parts live beside it, one job each:

- `tracktrain.engine.run_loop` (`RunLoop`, its base): the loop, the order of its events, stopping and resuming;
- `tracktrain.engine.handler_registry`: attaching and removing handlers, with every check made once, there;
- `tracktrain.engine.run_setup`: `run()`'s arguments and the state a run starts or resumes from;
- `tracktrain.engine.engine_state_dict`: what `state_dict()` holds and how `load_state_dict()` restores it.

Why this is cheaper than Ignite's loop: handlers live in a dict keyed by the event's name (a str, whose hash is
cached), filters are plain objects evaluated inline, and firing an event walks one list (`Engine._fire`).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tracktrain.engine.engine_state_dict import engine_state_dict, load_engine_state
from tracktrain.engine.events import EventEnum, Events, EventsList, RemovableEventHandle
from tracktrain.engine.handler_registry import HandlerRecord, HandlerRegistry, event_key
from tracktrain.engine.run_loop import RunLoop
from tracktrain.engine.run_setup import (
    check_and_set_limit,
    check_run_arguments,
    resume_run_state,
    start_new_run_state,
)
from tracktrain.engine.signature import check_signature
from tracktrain.engine.state import State

__all__ = ["Engine"]


class Engine(RunLoop):
    """Runs `process_function(engine, batch)` over data for a number of epochs or iterations, firing events.

    Args:
        process_function: called once per iteration with the engine and the batch; whatever it returns is
            stored in `engine.state.output`.

    .. code-block:: python

        def train_step(engine, batch):
            x, y = batch
            ...
            return loss


        trainer = Engine(train_step)


        @trainer.on(Events.ITERATION_COMPLETED(every=100))
        def log_loss(engine):
            print(engine.state.iteration, engine.state.output)


        trainer.run(train_loader, max_epochs=10)
    """

    _state_dict_all_req_keys: tuple[str, ...] = ("epoch_length", "iteration")
    _state_dict_one_of_opt_keys: tuple[tuple[str, ...], ...] = (("max_epochs", "max_iters"),)

    def __init__(self, process_function: Callable[[Engine, Any], Any]) -> None:
        if process_function is None:
            raise ValueError(
                "Engine must be given a processing function in order to run: Engine(process_function), where "
                "process_function(engine, batch) runs one iteration."
            )
        if not callable(process_function):
            raise TypeError(
                f"{process_function!r} is not a callable object: Engine needs a process_function(engine, batch)."
            )
        check_signature(process_function, "process_function", (self, None))
        super().__init__(process_function)
        self.logger = logging.getLogger(f"{__name__}.{type(self).__name__}")
        self._handlers = HandlerRegistry()
        # the registry's own dict, read directly by the hot path (`_fire`)
        self._event_handlers: dict[str, list[HandlerRecord]] = self._handlers.handlers
        self._state_dict_user_keys: list[str] = []
        self.last_event_name: Any = None
        self.state = State()
        self.register_events(*Events)

    # ---------------------------------------------------------------------------------------------------- events
    def register_events(self, *event_names: str | EventEnum, event_to_attr: dict | None = None) -> None:
        """Allow custom events on this engine; `event_to_attr` names the state counter each one's filters use.

        .. code-block:: python

            class TBPTTEvents(EventEnum):
                TIME_ITERATION_STARTED = "time_iteration_started"


            engine.register_events(*TBPTTEvents, event_to_attr={TBPTTEvents.TIME_ITERATION_STARTED: "time_iteration"})
            # engine.state.time_iteration now exists (0); increment it before fire_event to use every=/once=
        """
        self._handlers.register(event_names, event_to_attr, self.state)
        self.state._update_attrs()

    def has_registered_events(self, event: Any) -> bool:
        return self._handlers.is_registered(event)

    def add_event_handler(self, event_name: Any, handler: Callable, *args: Any, **kwargs: Any) -> RemovableEventHandle:
        """Call `handler` whenever `event_name` fires; returns a handle that removes it.

        `handler` may take the engine as first argument or not; `args`/`kwargs` are passed after it. Handlers
        of EXCEPTION_RAISED also receive the exception (after the engine). `event_name` may be filtered
        (`Events.ITERATION_COMPLETED(every=10)`) or a list (`Events.STARTED | Events.COMPLETED`).
        """
        if isinstance(event_name, EventsList):
            for event in event_name:
                self.add_event_handler(event, handler, *args, **kwargs)
            return RemovableEventHandle(event_name, handler, self)
        self._handlers.attach(self, event_name, handler, args, kwargs)
        return RemovableEventHandle(event_name, handler, self)

    def on(self, event_name: Any, *args: Any, **kwargs: Any) -> Callable[[Callable], Callable]:
        """Decorator form of `add_event_handler`; returns the function unchanged."""

        def decorator(handler: Callable) -> Callable:
            self.add_event_handler(event_name, handler, *args, **kwargs)
            return handler

        return decorator

    def has_event_handler(self, handler: Callable, event_name: Any | None = None) -> bool:
        """Whether `handler` is attached to `event_name` (to any event when None), filtered or not."""
        return self._handlers.has(handler, event_name)

    def remove_event_handler(self, handler: Callable, event_name: Any) -> None:
        """Detach `handler` from `event_name`; raises ValueError if it was not attached there."""
        self._handlers.remove(handler, event_name)

    def fire_event(self, event_name: Any) -> None:
        """Run the handlers of a (custom) event; for use in handlers and process functions."""
        key = self._handlers.allowed_key(event_name, self)
        # the registered event, so that the loop's identity checks on last_event_name see a name-fired event
        self._fire_event(self._handlers.allowed_events[key])

    def _fire_event(self, event_name: Any, *event_args: Any, **event_kwargs: Any) -> None:
        """Run the handlers of `event_name`, passing `event_args` (after the engine) and `event_kwargs`."""
        if not event_args and not event_kwargs:
            self._fire(event_name, event_key(event_name))
            return
        self.last_event_name = event_name
        records = self._event_handlers.get(event_key(event_name))
        if not records:
            return
        for handler, pass_engine, args, kwargs, event_filter, counter_attr, takes_event_kwargs in records:
            if event_filter is not None and not event_filter(self, getattr(self.state, counter_attr)):
                continue
            if event_kwargs and takes_event_kwargs:
                kwargs = {**kwargs, **event_kwargs}
            if pass_engine:
                handler(self, *event_args, *args, **kwargs)
            else:
                handler(*event_args, *args, **kwargs)

    def _fire(self, event: Any, key: str) -> None:
        """The hot path of `_fire_event`: no event arguments, and the loop passes the key it knows already."""
        self.last_event_name = event
        records = self._event_handlers.get(key)
        if not records:
            return
        for handler, pass_engine, args, kwargs, event_filter, counter_attr, _ in records:
            if event_filter is not None and not event_filter(self, getattr(self.state, counter_attr)):
                continue
            if pass_engine:
                handler(self, *args, **kwargs)
            else:
                handler(*args, **kwargs)

    def _handle_exception(self, e: BaseException) -> None:
        if self._event_handlers.get("EXCEPTION_RAISED"):
            self._fire_event(Events.EXCEPTION_RAISED, e)
        else:
            raise e

    # ----------------------------------------------------------------------------------------------- state_dict
    @property
    def state_dict_user_keys(self) -> list[str]:
        """Names of user attributes of `engine.state` that `state_dict()` saves and `load_state_dict()` needs."""
        return self._state_dict_user_keys

    def state_dict(self) -> OrderedDict:
        """`epoch_length`, `iteration`, `max_epochs` or `max_iters`, and the user keys."""
        return engine_state_dict(self.state, self._state_dict_all_req_keys, self._state_dict_user_keys)

    def load_state_dict(self, state_dict: Mapping) -> None:
        """Restore counters and limits saved by `state_dict()`; the next `run()` resumes from them.

        Needs `epoch_length`, one of `iteration`/`epoch` and one of `max_epochs`/`max_iters`, plus every key in
        `state_dict_user_keys`.
        """
        load_engine_state(
            self.state,
            state_dict,
            self._state_dict_all_req_keys,
            self._state_dict_one_of_opt_keys,
            self._state_dict_user_keys,
        )
        # A loaded state replaces whatever run was paused: the next run() starts from it.
        self._forget_paused_run()

    # ------------------------------------------------------------------------------------------------------ run
    def _check_and_set_max_epochs(self, max_epochs: int | None = None) -> None:
        """Validate a new `max_epochs` against the state (not below the epoch reached) and set it (Ignite's)."""
        check_and_set_limit(self.state, "max_epochs", max_epochs, "epoch", self.state.epoch)

    def _check_and_set_max_iters(self, max_iters: int | None = None) -> None:
        """Validate a new `max_iters` against the state (not below the iteration reached) and set it (Ignite's)."""
        check_and_set_limit(self.state, "max_iters", max_iters, "iteration", self.state.iteration)

    def run(
        self,
        data: Iterable | None = None,
        max_epochs: int | None = None,
        epoch_length: int | None = None,
        max_iters: int | None = None,
        seed: int | None = None,
    ) -> State:
        """Run `process_function` over `data`; returns the state.

        - The first call, or a call after the previous run finished, starts a new run: counters start at 0,
          `max_epochs` defaults to 1 and `epoch_length` to `len(data)` (for data without a length, the first
          time it runs dry defines the epoch length).
        - A call on an unfinished run (after `interrupt()`, `terminate()`, an exception, or
          `load_state_dict()`) resumes it; `max_epochs`/`max_iters` given then extend or shorten it, but not
          below the progress already made. To restart instead, set `engine.state.max_epochs = None`.

        Args:
            data: an iterable, re-iterated each epoch (e.g. a DataLoader). None needs `epoch_length`; every
                batch is then None.
            max_epochs: epochs to run (exclusive with `max_iters`).
            epoch_length: iterations per epoch.
            max_iters: iterations to run in total (exclusive with `max_epochs`).
            seed: stored in `state.seed`; `DeterministicEngine` derives its per-epoch seeds from it.
        """
        state = self.state
        check_run_arguments(state, data, max_epochs, epoch_length, max_iters, seed)
        if state.max_epochs is not None:
            self._check_and_set_max_epochs(max_epochs)
        if state.max_iters is not None:
            self._check_and_set_max_iters(max_iters)

        new_run = (state.max_epochs is None and state.max_iters is None) or (
            self._is_done(state) and not self._has_paused_run()
        )
        if new_run:
            start_new_run_state(state, data, max_epochs, epoch_length, max_iters, seed, self._get_data_length)
            self._forget_paused_run()
            self.logger.info("Engine run starting with max_epochs=%s, max_iters=%s.", state.max_epochs, state.max_iters)
        else:
            resume_run_state(state, data, epoch_length, seed, self._get_data_length)
            self._prepare_resume()
            self.logger.info("Engine run resuming from iteration %d, epoch %d.", state.iteration, state.epoch)
        return self._advance_run(data)
