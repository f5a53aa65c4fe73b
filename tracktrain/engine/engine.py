"""The Engine: an event loop over data with PyTorch-Ignite's semantics and less overhead per iteration.

One class, read top to bottom: construction, events and their handlers, `state_dict`, the stop requests, `run()` and
the loop itself. Beside it, each with one job: `tracktrain.engine.events` (the events, their filters, the handle that
removes a handler), `tracktrain.engine.handler_registry` (attaching and removing handlers, every check made once,
there), `tracktrain.engine.run_setup` (`run()`'s arguments and the state a run starts or resumes from) and
`tracktrain.engine.engine_state_dict` (what `state_dict()` holds and how `load_state_dict()` restores it).

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
cached), filters are plain objects evaluated inline, firing an event walks one list (`Engine._fire`), and the three
stop flags are folded into one boolean, checked after each event; there is no per-event logging.
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

from tracktrain.engine.engine_state_dict import engine_state_dict, load_engine_state
from tracktrain.engine.events import EventEnum, Events, EventsList, RemovableEventHandle
from tracktrain.engine.handler_registry import HandlerRecord, HandlerRegistry, event_key
from tracktrain.engine.run_setup import (
    check_and_set_limit,
    check_run_arguments,
    data_length,
    is_done,
    resume_run_state,
    start_new_run_state,
)
from tracktrain.engine.signature import check_signature
from tracktrain.engine.state import State

__all__ = ["Engine"]


_STARTED, _EPOCH_STARTED, _EPOCH_COMPLETED = Events.STARTED, Events.EPOCH_STARTED, Events.EPOCH_COMPLETED
_GET_BATCH_STARTED, _GET_BATCH_COMPLETED = Events.GET_BATCH_STARTED, Events.GET_BATCH_COMPLETED
_ITERATION_STARTED, _ITERATION_COMPLETED = Events.ITERATION_STARTED, Events.ITERATION_COMPLETED
_DATALOADER_STOP_ITERATION = Events.DATALOADER_STOP_ITERATION


class _EngineTerminateException(Exception):
    """Raised inside the loop to unwind to the TERMINATE event."""


class _EngineTerminateSingleEpochException(Exception):
    """Raised inside the loop to unwind to the TERMINATE_SINGLE_EPOCH event."""


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

    # Ignite's switch, settable on the class or on an engine: False makes interrupt() an error.
    interrupt_resume_enabled = True

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
        self._process_function = process_function
        self.logger = logging.getLogger(f"{__name__}.{type(self).__name__}")
        self._handlers = HandlerRegistry()
        # the registry's own dict, read directly by the hot path (`_fire`)
        self._event_handlers: dict[str, list[HandlerRecord]] = self._handlers.handlers
        self._state_dict_user_keys: list[str] = []
        self.last_event_name: Any = None
        self.state = State()
        # Stop requests. `terminate()`/`terminate_epoch()` store True or a "skip_*" string like Ignite; the loop
        # itself only reads `_stop_requested`, which the property setters keep up to date.
        self._should_terminate: bool | str = False
        self._should_terminate_single_epoch: bool | str = False
        self._should_interrupt = False
        self._stop_requested = False
        # The run's bookkeeping: the data iterator, where a resumed epoch starts, the paused run.
        self._dataloader_iter: Iterator[Any] | None = None
        self._init_iter: int | None = None
        self._internal_run_generator: Generator[Any, None, State] | None = None
        self._resume_after_failure = False
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

    def wrap_event_handlers(self, wrapper: Callable[[str, Callable], Callable], owner: Any) -> Callable[[], None]:
        """Put `wrapper(event name, handler)` in the place of each handler attached now that `owner` has not wrapped
        yet, called as the handler was (for tools that measure handlers: Ignite's profilers); returns the function
        that takes these wrappers off. Not Ignite's (its profilers edit the engine's private lists): firing still
        walks one list and costs nothing more than the wrappers themselves."""
        return self._handlers.wrap(wrapper, owner)

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

    _is_done = staticmethod(is_done)
    _get_data_length = staticmethod(data_length)

    def _has_paused_run(self) -> bool:
        """Whether a run was paused (interrupt()) and `run()` would continue it."""
        return self._internal_run_generator is not None

    def _forget_paused_run(self) -> None:
        """Drop the paused run and its data iterator: the next `run()` starts from the state as it is."""
        self._internal_run_generator = None
        self._dataloader_iter = None
        self._init_iter = None

    def _prepare_resume(self) -> None:
        """Where an unfinished run picks up, once `run()` has checked its arguments against the state."""
        state = self.state
        if self.should_terminate:
            # resuming after terminate(): the cut-short epoch is over, the next one starts at its beginning
            self._init_iter = 0
        elif self._resume_after_failure and state.epoch_length:
            # resuming after an exception: finish the epoch it broke off, counting from its iteration
            state.epoch = state.iteration // state.epoch_length
            self._init_iter = None

    def _advance_run(self, data: Iterable | None) -> State:
        """Run the (new or paused) run on `data` until it ends or pauses; returns the state."""
        if self._dataloader_iter is None:
            self.state.dataloader = data

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

    def set_data(self, data: Iterable) -> None:
        """Swap the data source mid-run: the next batch comes from `data`. `epoch_length` is unchanged."""
        if not isinstance(data, Iterable):
            raise TypeError(f"Argument data should be iterable, got {type(data).__name__}.")
        self.state.dataloader = data
        self._dataloader_iter = iter(data)

    # ------------------------------------------------------------------------------------------------- the loop
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
                                stacklevel=4,  # Engine.run (frames: here, _internal_run_as_gen, _advance_run)
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
