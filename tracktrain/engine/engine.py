"""The Engine: an event loop over data with PyTorch-Ignite's semantics and less overhead per iteration.

Order of events in one run (counters are incremented *before* their STARTED event)::

    STARTED
    for each epoch:                         epoch += 1
        EPOCH_STARTED
        for each iteration:
            GET_BATCH_STARTED               (not fired again right after DATALOADER_STOP_ITERATION)
            [DATALOADER_STOP_ITERATION]     when the iterator runs dry; it is then re-created
            GET_BATCH_COMPLETED
            ITERATION_STARTED               iteration += 1 just before
            process_function(engine, batch) -> state.output
            ITERATION_COMPLETED
        EPOCH_COMPLETED
    COMPLETED

`terminate()` ends the run after the current event with TERMINATE then COMPLETED (the cut-short epoch gets no
EPOCH_COMPLETED); `terminate_epoch()` ends the epoch with TERMINATE_SINGLE_EPOCH then EPOCH_COMPLETED;
`interrupt()` fires INTERRUPT and returns from `run()`, and the next `run()` resumes at the exact batch.
With `data=None` no GET_BATCH_* or DATALOADER_STOP_ITERATION events fire and every batch is None.

Why this is cheaper than Ignite's loop: handlers live in a dict keyed by the event's name (a str, whose hash is
cached), filters are plain objects evaluated inline, there is no per-event logging, and the three stop flags
are folded into one boolean checked after each event.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from typing import Any

from tracktrain.engine._signature import accepts, check_signature
from tracktrain.engine.events import CallableEventWithFilter, EventEnum, Events, EventsList, RemovableEventHandle
from tracktrain.engine.state import State
from tracktrain.number_checks import is_integral

__all__ = ["Engine"]


# One attached handler: (handler, pass_engine, args, kwargs, event_filter, counter_attr, takes_event_kwargs). A plain
# tuple, not a NamedTuple: the hot path unpacks it, and only an exact tuple unpacks without the iterator protocol
# (a NamedTuple costs ~0.03 µs more per handler call).
_Record = tuple[Callable, bool, tuple, dict, Any, Any, bool]


_STARTED, _EPOCH_STARTED, _EPOCH_COMPLETED = Events.STARTED, Events.EPOCH_STARTED, Events.EPOCH_COMPLETED
_GET_BATCH_STARTED, _GET_BATCH_COMPLETED = Events.GET_BATCH_STARTED, Events.GET_BATCH_COMPLETED
_ITERATION_STARTED, _ITERATION_COMPLETED = Events.ITERATION_STARTED, Events.ITERATION_COMPLETED
_DATALOADER_STOP_ITERATION = Events.DATALOADER_STOP_ITERATION


class _EngineTerminateException(Exception):
    """Raised inside the loop to unwind to the TERMINATE event."""


class _EngineTerminateSingleEpochException(Exception):
    """Raised inside the loop to unwind to the TERMINATE_SINGLE_EPOCH event."""


def _event_key(event: Any) -> str:
    """Handlers are stored by event name: events compare equal to their filtered versions and to their name."""
    return event.name if isinstance(event, CallableEventWithFilter) else event


def _positive_int(name: str, value: Any) -> int:
    if not (is_integral(value) and not isinstance(value, bool) and value > 0):
        raise ValueError(f"Argument {name} is invalid. Please, set a correct {name} positive value (got {value!r}).")
    return int(value)


class Engine:
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
    # Ignite's switch, settable on the class or on an engine: False makes interrupt() an error.
    interrupt_resume_enabled = True

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
        self._process_function = process_function
        self.logger = logging.getLogger(f"{__name__}.{type(self).__name__}")
        self._event_handlers: dict[str, list[_Record]] = {}
        self._allowed_events: dict[str, Any] = {}
        self._state_dict_user_keys: list[str] = []
        self.last_event_name: Any = None
        self.state = State()
        # Stop requests. `terminate()`/`terminate_epoch()` store True or a "skip_*" string like Ignite; the loop
        # itself only reads `_stop_requested`, which the property setters keep up to date.
        self._should_terminate: bool | str = False
        self._should_terminate_single_epoch: bool | str = False
        self._should_interrupt = False
        self._stop_requested = False
        self._dataloader_iter: Iterator[Any] | None = None
        self._init_iter: int | None = None
        self._internal_run_generator: Generator[Any, None, State] | None = None
        self._resume_after_failure = False
        self.register_events(*Events)

    # ------------------------------------------------------------------------------------------------ stop flags
    @property
    def should_terminate(self) -> bool | str:
        return self._should_terminate

    @should_terminate.setter
    def should_terminate(self, value: bool | str) -> None:
        self._should_terminate = value
        self._update_stop_requested()

    @property
    def should_terminate_single_epoch(self) -> bool | str:
        return self._should_terminate_single_epoch

    @should_terminate_single_epoch.setter
    def should_terminate_single_epoch(self, value: bool | str) -> None:
        self._should_terminate_single_epoch = value
        self._update_stop_requested()

    @property
    def should_interrupt(self) -> bool:
        return self._should_interrupt

    @should_interrupt.setter
    def should_interrupt(self, value: bool) -> None:
        self._should_interrupt = value
        self._update_stop_requested()

    def _update_stop_requested(self) -> None:
        self._stop_requested = bool(
            self._should_terminate or self._should_terminate_single_epoch or self._should_interrupt
        )

    def terminate(self, skip_completed: bool = False) -> None:
        """Stop the run after the current event: TERMINATE then COMPLETED fire (COMPLETED not with
        `skip_completed=True`); the epoch cut short gets no EPOCH_COMPLETED. A later `run()` continues."""
        self.logger.info("Terminate signaled. Engine will stop after current iteration is finished.")
        self.should_terminate = "skip_completed" if skip_completed else True

    def terminate_epoch(self, skip_epoch_completed: bool = False) -> None:
        """End the current epoch after the current event: TERMINATE_SINGLE_EPOCH then EPOCH_COMPLETED (unless
        `skip_epoch_completed=True`) fire, and the next epoch starts on fresh data."""
        self.logger.info("Terminate current epoch is signaled. Epoch will stop after current iteration.")
        self.should_terminate_single_epoch = "skip_epoch_completed" if skip_epoch_completed else True

    def interrupt(self) -> None:
        """Pause the run after the current event: INTERRUPT fires and `run()` returns the state; calling
        `run()` again resumes at the exact next batch without firing STARTED again."""
        if not self.interrupt_resume_enabled:
            raise RuntimeError(
                "Engine 'interrupt/resume' feature is disabled. Please, set Engine.interrupt_resume_enabled=True to "
                "enable it (or engine.interrupt_resume_enabled = True for this engine only)."
            )
        self.logger.info("Interrupt signaled. Engine will interrupt the run after current iteration.")
        self.should_interrupt = True

    # ---------------------------------------------------------------------------------------------------- events
    def register_events(self, *event_names: str | EventEnum, event_to_attr: dict | None = None) -> None:
        """Allow custom events on this engine; `event_to_attr` names the state counter each one's filters use.

        .. code-block:: python

            class TBPTTEvents(EventEnum):
                TIME_ITERATION_STARTED = "time_iteration_started"


            engine.register_events(*TBPTTEvents, event_to_attr={TBPTTEvents.TIME_ITERATION_STARTED: "time_iteration"})
            # engine.state.time_iteration now exists (0); increment it before fire_event to use every=/once=
        """
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
            self._allowed_events[_event_key(event)] = event
            if event_to_attr and event in event_to_attr:
                # State.__init__ gives each state its own dict; the class-level Mapping is Ignite's shared default.
                assert isinstance(self.state.event_to_attr, dict)
                self.state.event_to_attr[event] = event_to_attr[event]
        self.state._update_attrs()

    def has_registered_events(self, event: Any) -> bool:
        return _event_key(event) in self._allowed_events

    def _assert_allowed_event(self, event: Any) -> str:
        key = _event_key(event)
        if not isinstance(key, str) or key not in self._allowed_events:
            raise ValueError(
                f"Event {event} is not a valid event for this {type(self).__name__}. Use a member of Events, "
                "or register your own first with engine.register_events(...)."
            )
        return key

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
        if not callable(handler):
            raise TypeError(f"{handler!r} is not a callable object: a handler for {event_name!r} must be callable.")
        key = self._assert_allowed_event(event_name)

        event_filter = getattr(event_name, "filter", None)
        counter_attr = None
        if event_filter is not None:
            counter_attr = self.state.event_to_attr.get(key)
            if counter_attr is None:
                raise ValueError(
                    f"Cannot filter {event_name!r}: the event has no counter on engine.state to filter on. "
                    f"For a custom event, register it with engine.register_events(..., "
                    f"event_to_attr={{event: 'counter_name'}}) and increment that counter before firing it."
                )

        pass_engine, takes_event_kwargs = self._call_convention(key, handler, args, kwargs)
        record: _Record = (handler, pass_engine, args, kwargs, event_filter, counter_attr, takes_event_kwargs)
        self._event_handlers.setdefault(key, []).append(record)
        return RemovableEventHandle(event_name, handler, self)

    def _call_convention(self, key: str, handler: Callable, args: tuple, kwargs: dict) -> tuple[bool, bool]:
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
            lead = (self, *event_args) if pass_engine else event_args
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

    def on(self, event_name: Any, *args: Any, **kwargs: Any) -> Callable[[Callable], Callable]:
        """Decorator form of `add_event_handler`; returns the function unchanged."""

        def decorator(handler: Callable) -> Callable:
            self.add_event_handler(event_name, handler, *args, **kwargs)
            return handler

        return decorator

    def has_event_handler(self, handler: Callable, event_name: Any | None = None) -> bool:
        """Whether `handler` is attached to `event_name` (to any event when None), filtered or not."""
        keys = [_event_key(event_name)] if event_name is not None else list(self._event_handlers)
        return any(record[0] == handler for key in keys for record in self._event_handlers.get(key, ()))

    def remove_event_handler(self, handler: Callable, event_name: Any) -> None:
        """Detach `handler` from `event_name`; raises ValueError if it was not attached there."""
        key = _event_key(event_name)
        if key not in self._event_handlers:
            raise ValueError(
                f"Input event name '{event_name}' does not exist: no handler is attached to it on this engine."
            )
        records = self._event_handlers[key]
        kept = [record for record in records if record[0] != handler]
        if len(kept) == len(records):
            raise ValueError(
                f"Input handler '{handler}' is not found among registered event handlers of {event_name!r}."
            )
        # A new list, not an in-place edit: an event being fired right now still calls every handler it had.
        self._event_handlers[key] = kept

    def fire_event(self, event_name: Any) -> None:
        """Run the handlers of a (custom) event; for use in handlers and process functions."""
        key = self._assert_allowed_event(event_name)
        # the registered event, so that the loop's identity checks on last_event_name see a name-fired event
        self._fire_event(self._allowed_events[key])

    def _fire_event(self, event_name: Any, *event_args: Any, **event_kwargs: Any) -> None:
        """Run the handlers of `event_name`, passing `event_args` (after the engine) and `event_kwargs`."""
        if not event_args and not event_kwargs:
            self._fire(event_name, _event_key(event_name))
            return
        self.last_event_name = event_name
        records = self._event_handlers.get(_event_key(event_name))
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
        keys = self._state_dict_all_req_keys
        keys += ("max_iters",) if self.state.max_iters is not None else ("max_epochs",)
        keys += tuple(self._state_dict_user_keys)
        return OrderedDict((k, getattr(self.state, k)) for k in keys)

    def load_state_dict(self, state_dict: Mapping) -> None:
        """Restore counters and limits saved by `state_dict()`; the next `run()` resumes from them.

        Needs `epoch_length`, one of `iteration`/`epoch` and one of `max_epochs`/`max_iters`, plus every key in
        `state_dict_user_keys`.
        """
        # Checked in Ignite's order and starting with Ignite's words (users and their tests match on them).
        if not isinstance(state_dict, Mapping):
            raise TypeError(
                f"Argument state_dict should be a dictionary, but given {type(state_dict)}: pass what "
                "engine.state_dict() returned."
            )
        if "iteration" in state_dict and "epoch" in state_dict:
            raise ValueError(
                "State dictionary should contain only one of 'iteration' or 'epoch' keys. "
                f"Found both: iteration={state_dict['iteration']}, epoch={state_dict['epoch']}."
            )
        state_dict = dict(state_dict)
        if "iteration" in state_dict or "epoch" in state_dict:
            epoch_length = state_dict.get("epoch_length")
            if state_dict.get("epoch") == 0 or state_dict.get("iteration") == 0:
                state_dict["epoch"] = state_dict["iteration"] = 0
            elif "iteration" in state_dict and "epoch_length" in state_dict and epoch_length is None:
                # Data without a length (saved mid-run by DeterministicEngine): Ignite refuses this state,
                # we resume it by iteration, the epoch count unknown.
                state_dict["epoch"] = 0
            elif epoch_length is None or not (is_integral(epoch_length) and epoch_length > 0):
                raise ValueError(
                    "epoch_length must be a positive integer to calculate missing 'iteration' or 'epoch' key. "
                    f"Input state_dict: {state_dict}"
                )
            elif "epoch" in state_dict:
                state_dict["iteration"] = state_dict["epoch"] * epoch_length
            else:
                state_dict["epoch"] = state_dict["iteration"] // epoch_length
        for key in self._state_dict_all_req_keys:
            if key not in state_dict:
                raise ValueError(
                    f"Required state attribute '{key}' is absent in provided state_dict '{state_dict.keys()}': "
                    "pass what engine.state_dict() returned."
                )
        limit_names = self._state_dict_one_of_opt_keys[0]
        limits = [k for k in limit_names if k in state_dict]
        if len(limits) != 1:
            raise ValueError(
                f"state_dict should contain exactly one of '{limit_names}' keys; got keys {list(state_dict)}."
            )
        for key in self._state_dict_user_keys:
            if key not in state_dict:
                raise ValueError(
                    f"Required user state attribute '{key}' is absent in provided state_dict "
                    f"'{state_dict.keys()}': save it with the state, or remove it from engine.state_dict_user_keys."
                )
        epoch_length = state_dict["epoch_length"]
        if epoch_length is not None and not (
            is_integral(epoch_length) and not isinstance(epoch_length, bool) and epoch_length > 0
        ):
            raise ValueError(f"state_dict['epoch_length'] must be a positive integer or None, got {epoch_length!r}.")
        for counter in ("iteration", "epoch"):
            if counter not in state_dict:
                continue
            value = state_dict[counter]
            if not (is_integral(value) and value >= 0):
                raise ValueError(f"state_dict['{counter}'] must be an integer >= 0, got {value!r}.")
        iteration = int(state_dict["iteration"])
        epoch = iteration // epoch_length if epoch_length is not None else 0
        limit_name = limits[0]
        limit = state_dict[limit_name]  # None: the state of an engine that never ran (Ignite round-trips it)
        if limit is not None:
            if not is_integral(limit) or isinstance(limit, bool):
                raise ValueError(f"state_dict['{limit_name}'] must be a positive integer or None, got {limit!r}.")
            if limit < 1:
                raise ValueError(
                    f"Argument {limit_name} is invalid. Please, set a correct {limit_name} positive value "
                    f"(state_dict['{limit_name}'] is {limit})."
                )
            progress_name, progress = ("epoch", epoch) if limit_name == "max_epochs" else ("iteration", iteration)
            if limit < progress:
                raise ValueError(
                    f"Argument {limit_name} should be greater than or equal to the start {progress_name} defined in "
                    f"the state: {limit} vs {progress}. Please, set engine.state.{limit_name} = None before calling "
                    "engine.run() in order to restart the training from the beginning."
                )

        self.state.epoch_length = epoch_length
        self.state.iteration = iteration
        self.state.epoch = epoch
        self.state.max_epochs = limit if limit_name == "max_epochs" else None
        self.state.max_iters = limit if limit_name == "max_iters" else None
        for key in self._state_dict_user_keys:
            setattr(self.state, key, state_dict[key])
        # A loaded state replaces whatever run was paused: the next run() starts from it.
        self._internal_run_generator = None
        self._dataloader_iter = None
        self._init_iter = None

    # ------------------------------------------------------------------------------------------------------ run
    def _check_and_set_max_epochs(self, max_epochs: int | None = None) -> None:
        """Validate a new `max_epochs` against the state (not below the epoch reached) and set it (Ignite's)."""
        self._check_and_set_termination_param("max_epochs", max_epochs, "epoch", self.state.epoch)

    def _check_and_set_max_iters(self, max_iters: int | None = None) -> None:
        """Validate a new `max_iters` against the state (not below the iteration reached) and set it (Ignite's)."""
        self._check_and_set_termination_param("max_iters", max_iters, "iteration", self.state.iteration)

    def _check_and_set_termination_param(
        self, name: str, value: int | None, progress_name: str, progress_value: int
    ) -> None:
        if value is None:
            return
        if value < 1:
            raise ValueError(f"Argument {name} is invalid. Please, set a correct {name} positive value (got {value}).")
        if value < progress_value:
            raise ValueError(
                f"Argument {name} should be greater than or equal to the start {progress_name} defined in the state: "
                f"{value} vs {progress_value}. Please, set engine.state.{name} = None before calling engine.run() in "
                "order to restart the training from the beginning."
            )
        setattr(self.state, name, value)

    @staticmethod
    def _is_done(state: State) -> bool:
        if state.max_iters is not None and state.iteration >= state.max_iters:
            return True
        if state.max_epochs is None:
            return False
        if state.epoch_length is not None and state.iteration >= state.epoch_length * state.max_epochs:
            return True
        return state.epoch >= state.max_epochs

    @staticmethod
    def _get_data_length(data: Iterable) -> int | None:
        try:
            if hasattr(data, "__len__"):
                return len(data)  # type: ignore[arg-type]
        except TypeError:  # e.g. a DataLoader over an IterableDataset without __len__
            pass
        return None

    def set_data(self, data: Iterable) -> None:
        """Swap the data source mid-run: the next batch comes from `data`. `epoch_length` is unchanged."""
        if not isinstance(data, Iterable):
            raise TypeError(f"Argument data should be iterable, got {type(data).__name__}.")
        self.state.dataloader = data
        self._dataloader_iter = iter(data)

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
        # Checked in Ignite's order, each message starting with Ignite's words.
        if data is not None and not isinstance(data, Iterable):
            raise TypeError(
                f"Argument data should be iterable: got {type(data).__name__}; pass a DataLoader, a list, ..."
            )
        if max_epochs is not None and max_iters is not None:
            raise ValueError(
                "Arguments max_iters and max_epochs are mutually exclusive. Please provide only max_epochs or "
                f"max_iters. (Got max_epochs={max_epochs} and max_iters={max_iters}.)"
            )
        state = self.state
        # Ignite's rule: a state with one kind of limit keeps it, finished or not, until it is reset
        if max_iters is not None and state.max_epochs is not None:
            raise ValueError(
                "To switch from max_epochs to max_iters mode during resume, you must first reset by setting "
                f"'engine.state.max_epochs = None' before calling run(). (The state has max_epochs={state.max_epochs} "
                f"at epoch {state.epoch}; max_iters={max_iters} was given.)"
            )
        if max_epochs is not None and state.max_iters is not None:
            raise ValueError(
                "To switch from max_iters to max_epochs mode during resume, you must first reset by setting "
                f"'engine.state.max_iters = None' before calling run(). (The state has max_iters={state.max_iters} "
                f"at iteration {state.iteration}; max_epochs={max_epochs} was given.)"
            )
        if max_epochs is not None:
            _positive_int("max_epochs", max_epochs)
        if max_iters is not None:
            _positive_int("max_iters", max_iters)
        if epoch_length is not None and not (
            is_integral(epoch_length) and not isinstance(epoch_length, bool) and epoch_length > 0
        ):
            raise ValueError(
                f"Input data has zero size. Please provide non-empty data (epoch_length={epoch_length!r}; it must "
                "be a positive integer)."
            )
        if seed is not None and not is_integral(seed):
            raise TypeError(f"Argument seed must be an integer, got {seed!r}.")

        if state.max_epochs is not None:
            self._check_and_set_max_epochs(max_epochs)
        if state.max_iters is not None:
            self._check_and_set_max_iters(max_iters)

        new_run = (state.max_epochs is None and state.max_iters is None) or (
            self._is_done(state) and self._internal_run_generator is None
        )
        if new_run:
            if data is None and epoch_length is None and state.epoch_length is None:
                raise ValueError("epoch_length should be provided if data is None.")
            if epoch_length is None:
                if data is not None:
                    epoch_length = self._get_data_length(data)
                if epoch_length is None:  # data without a length: keep the one the last run found
                    epoch_length = state.epoch_length
                if epoch_length is not None and epoch_length < 1:
                    raise ValueError("Input data has zero size. Please provide non-empty data.")
            if max_iters is None and max_epochs is None:
                max_epochs = 1
            state.iteration = 0
            state.epoch = 0
            state.max_epochs = max_epochs
            state.max_iters = max_iters
            state.epoch_length = epoch_length
            state.seed = seed
            self._internal_run_generator = None
            self._init_iter = None
            self._dataloader_iter = None
            self.logger.info("Engine run starting with max_epochs=%s, max_iters=%s.", max_epochs, max_iters)
        else:
            if state.epoch_length is not None:
                if epoch_length is not None and epoch_length != state.epoch_length:
                    raise ValueError(
                        "Argument epoch_length should be same as in the state, "
                        f"but given {epoch_length} vs {state.epoch_length}. Resuming cannot change the epoch "
                        "length; start a new run (engine.state.max_epochs = None) to use another one."
                    )
            else:
                if epoch_length is None and data is not None:
                    epoch_length = self._get_data_length(data)
                if epoch_length is not None:
                    if epoch_length < 1:
                        raise ValueError("Input data has zero size. Please provide non-empty data.")
                    state.epoch_length = epoch_length
            if state.epoch_length is None and data is None:
                raise ValueError("epoch_length should be provided if data is None.")
            if seed is not None:
                state.seed = seed
            if self.should_terminate:
                # resuming after terminate(): the cut-short epoch is over, the next one starts at its beginning
                self._init_iter = 0
            elif self._resume_after_failure and state.epoch_length:
                # resuming after an exception: finish the epoch it broke off, counting from its iteration
                state.epoch = state.iteration // state.epoch_length
                self._init_iter = None
            self.logger.info("Engine run resuming from iteration %d, epoch %d.", state.iteration, state.epoch)

        if self._dataloader_iter is None:
            state.dataloader = data

        if self._internal_run_generator is None:
            self._internal_run_generator = self._internal_run_as_gen()
        self._resume_after_failure = False
        try:
            return next(self._internal_run_generator)
        except StopIteration as finished:
            self._internal_run_generator = None
            return finished.value
        except BaseException:
            # The run is over, but not done: the next run() resumes it from the state (Ignite instead returns
            # None from every later run() call).
            self._internal_run_generator = None
            self._resume_after_failure = True
            raise

    def _setup_dataloader_iter(self) -> None:
        if self.state.dataloader is None:
            if self.state.epoch_length is None:
                raise RuntimeError("Internal error: epoch_length is None while data is None.")
            self._dataloader_iter = itertools.repeat(None, self.state.epoch_length)
        else:
            self._dataloader_iter = iter(self.state.dataloader)

    def _setup_engine(self) -> None:
        self._setup_dataloader_iter()
        if self._init_iter is None:
            iteration = self.state.iteration
            if self.state.epoch_length is not None:
                iteration %= self.state.epoch_length
            self._init_iter = iteration

    def _stop_point(self) -> Generator[State, None, None]:
        """Act on a stop request: unwind for terminate/terminate_epoch, or pause the run for interrupt."""
        if self._should_terminate:
            raise _EngineTerminateException()
        if self._should_terminate_single_epoch:
            raise _EngineTerminateSingleEpochException()
        if self._should_interrupt:
            self._fire_event(Events.INTERRUPT)
            self.should_interrupt = False
            yield self.state

    def _internal_run_as_gen(self) -> Generator[State, None, State]:
        self.should_terminate = self.should_terminate_single_epoch = self.should_interrupt = False
        state = self.state
        state.times[Events.EPOCH_COMPLETED.name] = 0.0
        state.times[Events.COMPLETED.name] = 0.0
        start_time = time.perf_counter()
        try:
            try:
                self._fire(_STARTED, "STARTED")
                if self._stop_requested:
                    yield from self._stop_point()

                while not self._is_done(state) and not self._should_terminate:
                    state.epoch += 1
                    handlers_start = time.perf_counter()
                    self._fire(_EPOCH_STARTED, "EPOCH_STARTED")
                    epoch_time = time.perf_counter() - handlers_start
                    if self._stop_requested:
                        yield from self._stop_point()

                    if self._dataloader_iter is None:
                        self._setup_engine()

                    epoch_time += yield from self._run_once_on_dataset_as_gen()
                    # available to EPOCH_COMPLETED handlers, then updated to include them
                    state.times[Events.EPOCH_COMPLETED.name] = epoch_time
                    if self._should_terminate_single_epoch != "skip_epoch_completed":
                        handlers_start = time.perf_counter()
                        self._fire(_EPOCH_COMPLETED, "EPOCH_COMPLETED")
                        epoch_time += time.perf_counter() - handlers_start
                        state.times[Events.EPOCH_COMPLETED.name] = epoch_time
                    if self._should_terminate_single_epoch:
                        # the epoch is over already; there is nothing left to cut short
                        self.should_terminate_single_epoch = False
                    if self._stop_requested:
                        yield from self._stop_point()
                    self.logger.info("Epoch[%d] Complete. Time taken: %.3fs", state.epoch, epoch_time)

            except _EngineTerminateException:
                self._fire_event(Events.TERMINATE)

            except _EngineTerminateSingleEpochException:
                # from None: the internal control-flow exception says nothing to the user
                raise RuntimeError(
                    "The method terminate_epoch() should not be called on Event.STARTED or Event.EPOCH_STARTED. "
                    "There is no epoch in progress to end there: call terminate() to stop the run, or call "
                    "terminate_epoch() from an iteration event."
                ) from None

            time_taken = time.perf_counter() - start_time
            state.times[Events.COMPLETED.name] = time_taken
            if self._should_terminate != "skip_completed":
                handlers_start = time.perf_counter()
                self._fire_event(Events.COMPLETED)
                time_taken += time.perf_counter() - handlers_start
                state.times[Events.COMPLETED.name] = time_taken
            self.logger.info("Engine run finished. Time taken: %.3fs", time_taken)

        except GeneratorExit:
            # the paused run was discarded (engine reset or garbage-collected): not an error of the run
            self._dataloader_iter = None
            raise
        except BaseException as e:
            self._dataloader_iter = None
            # a stop asked for (Ctrl-C, a pre-emption signal, sys.exit) is not an error: not on stderr as one
            log = self.logger.info if isinstance(e, (KeyboardInterrupt, SystemExit)) else self.logger.error
            log("Engine run is terminating due to exception: %s", e)
            self._handle_exception(e)

        self._dataloader_iter = None
        return state

    def _run_once_on_dataset_as_gen(self) -> Generator[State, None, float]:
        start_time = time.perf_counter()
        # non-zero when resuming in the middle of an epoch
        iter_counter = 0 if self._init_iter is None else self._init_iter
        self._init_iter = None
        should_exit = False
        state = self.state
        fire = self._fire
        has_data = state.dataloader is not None
        try:
            if self._dataloader_iter is None:
                raise RuntimeError("Internal error: the data iterator is None at the start of an epoch.")
            while True:
                state.batch = None
                try:
                    # not fired twice when the data iterator has just been re-created
                    if has_data and self.last_event_name is not _DATALOADER_STOP_ITERATION:
                        fire(_GET_BATCH_STARTED, "GET_BATCH_STARTED")
                        if self._stop_requested:
                            yield from self._stop_point()
                    state.batch = next(self._dataloader_iter)
                    # reset here too: an iterable that ran dry must not leave the previous output visible
                    state.output = None
                    if has_data:
                        fire(_GET_BATCH_COMPLETED, "GET_BATCH_COMPLETED")
                        if self._stop_requested:
                            yield from self._stop_point()
                    iter_counter += 1
                    should_exit = False
                except StopIteration:
                    if state.epoch_length is None:
                        # data of unknown length: its first exhaustion defines the epoch length
                        state.epoch_length = iter_counter
                        if state.max_iters is not None:
                            state.max_epochs = math.ceil(state.max_iters / state.epoch_length)
                        break
                    if should_exit:
                        # the data ran dry right after being re-created: it cannot provide more
                        if not self._is_done(state):
                            total = (
                                state.epoch_length * state.max_epochs
                                if state.max_epochs is not None
                                else state.max_iters
                            )
                            warnings.warn(
                                "Data iterator can not provide data anymore but required total number of "
                                f"iterations to run is not reached. Current iteration: {state.iteration} vs "
                                f"Total iterations to run : {total}. Pass data that can be iterated again (a "
                                "DataLoader or a list, not a one-shot iterator) or a smaller epoch_length.",
                                stacklevel=3,
                            )
                        break
                    if has_data:
                        fire(_DATALOADER_STOP_ITERATION, "DATALOADER_STOP_ITERATION")
                        if self._stop_requested:
                            yield from self._stop_point()
                    self._setup_dataloader_iter()
                    should_exit = True
                    continue

                state.iteration += 1
                fire(_ITERATION_STARTED, "ITERATION_STARTED")
                if self._stop_requested:
                    yield from self._stop_point()

                state.output = self._process_function(self, state.batch)
                fire(_ITERATION_COMPLETED, "ITERATION_COMPLETED")
                if self._stop_requested:
                    yield from self._stop_point()

                if iter_counter == state.epoch_length:
                    break
                if state.max_iters is not None and state.iteration == state.max_iters:
                    self.should_terminate = True
                    raise _EngineTerminateException()

        except _EngineTerminateSingleEpochException:
            self._fire_event(Events.TERMINATE_SINGLE_EPOCH, iter_counter=iter_counter)
            self._setup_dataloader_iter()

        except _EngineTerminateException:
            raise

        except Exception as e:
            self.logger.error("Current run is terminating due to exception: %s", e)
            self._handle_exception(e)

        return time.perf_counter() - start_time
