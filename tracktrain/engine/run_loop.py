"""The Engine's run loop: the epochs and iterations a run walks, and how it stops, pauses and resumes.

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

The three stop flags are folded into one boolean, checked after each event; there is no per-event logging.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
import warnings
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any

from tracktrain.engine.events import Events
from tracktrain.engine.run_setup import data_length, is_done
from tracktrain.engine.state import State

__all__ = ["RunLoop"]


_STARTED, _EPOCH_STARTED, _EPOCH_COMPLETED = Events.STARTED, Events.EPOCH_STARTED, Events.EPOCH_COMPLETED
_GET_BATCH_STARTED, _GET_BATCH_COMPLETED = Events.GET_BATCH_STARTED, Events.GET_BATCH_COMPLETED
_ITERATION_STARTED, _ITERATION_COMPLETED = Events.ITERATION_STARTED, Events.ITERATION_COMPLETED
_DATALOADER_STOP_ITERATION = Events.DATALOADER_STOP_ITERATION


class _EngineTerminateException(Exception):
    """Raised inside the loop to unwind to the TERMINATE event."""


class _EngineTerminateSingleEpochException(Exception):
    """Raised inside the loop to unwind to the TERMINATE_SINGLE_EPOCH event."""


class RunLoop:
    """The run half of `Engine`: runs `process_function(engine, batch)` over data, and stops, pauses and
    resumes. It owns the run's bookkeeping (stop requests, the data iterator, the paused run).

    Firing events is the other half: a subclass (`Engine`) provides `state`, `logger`, `last_event_name` and the
    three firing hooks below. `_setup_engine` and `_setup_dataloader_iter` are the hooks a subclass overrides to
    choose the data iterator (`DeterministicEngine` does).
    """

    # Ignite's switch, settable on the class or on an engine: False makes interrupt() an error.
    interrupt_resume_enabled = True

    state: State
    logger: logging.Logger
    last_event_name: Any

    def __init__(self, process_function: Callable[[Any, Any], Any]) -> None:
        self._process_function = process_function
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

    # ----------------------------------------------------------------------------------- hooks of the subclass
    def _fire(self, event: Any, key: str) -> None:
        """Run the handlers of `event`, stored under `key`, without event arguments (the hot path)."""
        raise NotImplementedError

    def _fire_event(self, event_name: Any, *event_args: Any, **event_kwargs: Any) -> None:
        """Run the handlers of `event_name`, passing `event_args` (after the engine) and `event_kwargs`."""
        raise NotImplementedError

    def _handle_exception(self, e: BaseException) -> None:
        """Fire EXCEPTION_RAISED with `e`, or raise `e` when nothing handles it."""
        raise NotImplementedError

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

    # ---------------------------------------------------------------------------------------------- run helpers
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
