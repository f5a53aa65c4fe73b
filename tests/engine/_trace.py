"""Helpers for the differential tests of tracktrain's Engine against PyTorch-Ignite's (the oracle).

A scenario is a function `scenario(lib) -> Harness`: `lib` is either `TRACKTRAIN` or `IGNITE`, a namespace with
that library's `Engine`, `Events`, `EventEnum` and `EventsList`. The scenario builds its engine through
`Harness(lib, ...)`, which attaches a recorder to every member of `lib.Events`, and calls `harness.run(...)`
(which records the run's outcome: the returned state's counters, or the exception it raised, as a `Raised`).
`run_both(scenario)` runs it once per library and returns both harnesses; `assert_same(scenario)` compares them.

Everything recorded is plain data (names, ints, batches), never library objects, so the two traces compare
with `==`.
"""

from __future__ import annotations

import re
import types
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import tracktrain.engine as _tt

try:  # ignite is the oracle; the test module skips itself when it is missing
    import ignite.engine as _ig
except ImportError:  # pragma: no cover - the test module calls pytest.importorskip first
    _ig = None

TRACKTRAIN = types.SimpleNamespace(
    name="tracktrain",
    Engine=_tt.Engine,
    DeterministicEngine=_tt.DeterministicEngine,
    Events=_tt.Events,
    EventEnum=_tt.EventEnum,
    EventsList=_tt.EventsList,
    State=_tt.State,
)
IGNITE = (
    None
    if _ig is None
    else types.SimpleNamespace(
        name="ignite",
        Engine=_ig.Engine,
        DeterministicEngine=_ig.DeterministicEngine,
        Events=_ig.Events,
        EventEnum=_ig.EventEnum,
        EventsList=_ig.EventsList,
        State=_ig.State,
    )
)

# Events at which the current batch is meaningful (it is reset to None before GET_BATCH_STARTED).
BATCH_EVENTS = frozenset({"ITERATION_STARTED"})
# ... and those at which the output is worth recording too (it is reset to None once a batch has been fetched).
BATCH_AND_OUTPUT_EVENTS = frozenset(
    {
        "GET_BATCH_COMPLETED",
        "ITERATION_COMPLETED",
        "DATALOADER_STOP_ITERATION",
        "EPOCH_COMPLETED",
        "COMPLETED",
        "TERMINATE",
        "INTERRUPT",
    }
)
DRY_ITERATOR_WARNING = "Data iterator can not provide data anymore"


def step(engine: Any, batch: Any) -> Any:
    """Default process function: its output names the iteration and batch, so outputs are checked too."""
    return ("out", engine.state.iteration, batch)


def plain(value: Any) -> Any:
    """Recursively turn a value into something comparable across libraries (engines become '<engine>')."""
    if isinstance(value, (_tt.Engine,) + ((_ig.Engine,) if _ig is not None else ())):
        return "<engine>"
    if isinstance(value, BaseException):
        return ("<exception>", type(value).__name__)
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


# Every Harness made by the running test; the test module's autouse fixture calls `release()` on them afterwards.
LIVE: list[Harness] = []


class Harness:
    """One engine of one library plus the trace of everything that happened to it."""

    def __init__(
        self,
        lib: types.SimpleNamespace,
        process_function: Callable[[Any, Any], Any] = step,
        record_exceptions: bool = False,
        extra_events: Iterable[Any] = (),
        event_to_attr: dict | None = None,
    ) -> None:
        self.lib = lib
        self.trace: list[tuple] = []
        self.crashed = False
        self.engine = lib.Engine(process_function)
        self.warnings: list[str] = []
        self._exception_handlers: list[Callable] = []
        LIVE.append(self)
        extra_events = list(extra_events)
        if extra_events:  # custom events: registered (with their counters) before the recorder is attached
            self.engine.register_events(*extra_events, event_to_attr=event_to_attr)
        # Attaching an EXCEPTION_RAISED handler changes behaviour (exceptions are then swallowed), so it is only
        # recorded when the scenario asks for it.
        for event in list(lib.Events) + list(extra_events):
            if event.name == "EXCEPTION_RAISED" and not record_exceptions:
                continue
            handler = self._recorder(event.name)
            self.engine.add_event_handler(event, handler)
            if event.name == "EXCEPTION_RAISED":
                self._exception_handlers.append(handler)

    def add_exception_handler(self, handler: Callable, *args: Any, **kwargs: Any) -> Any:
        """Attach an EXCEPTION_RAISED handler that `release()` will detach again."""
        self._exception_handlers.append(handler)
        return self.engine.add_event_handler(self.lib.Events.EXCEPTION_RAISED, handler, *args, **kwargs)

    def release(self) -> None:
        """Detach the EXCEPTION_RAISED handlers before the engine is garbage-collected.

        A run left paused (after interrupt()) is closed when its engine is collected; Ignite hands the resulting
        GeneratorExit to the EXCEPTION_RAISED handlers, whose weak reference to the engine may already be dead,
        which pytest reports as an unraisable exception.
        """
        for handler in self._exception_handlers:
            if self.engine.has_event_handler(handler, self.lib.Events.EXCEPTION_RAISED):
                self.engine.remove_event_handler(handler, self.lib.Events.EXCEPTION_RAISED)
        self._exception_handlers.clear()

    def _recorder(self, name: str) -> Callable:
        trace = self.trace

        if name == "EXCEPTION_RAISED":

            def record_exception(engine: Any, exception: BaseException) -> None:
                trace.append((name, engine.state.epoch, engine.state.iteration, type(exception).__name__))

            return record_exception

        if name == "TERMINATE_SINGLE_EPOCH":

            def record_terminate_epoch(engine: Any, iter_counter: Any = "<missing>") -> None:
                trace.append((name, engine.state.epoch, engine.state.iteration, iter_counter))

            return record_terminate_epoch

        if name in BATCH_AND_OUTPUT_EVENTS:

            def record_batch_and_output(engine: Any) -> None:
                state = engine.state
                trace.append((name, state.epoch, state.iteration, state.batch, state.output))

            return record_batch_and_output

        if name in BATCH_EVENTS:

            def record_batch(engine: Any) -> None:
                trace.append((name, engine.state.epoch, engine.state.iteration, engine.state.batch))

            return record_batch

        def record(engine: Any) -> None:
            trace.append((name, engine.state.epoch, engine.state.iteration))

        return record

    # ------------------------------------------------------------------------------------------ test handlers
    def mark(self, label: str, action: Callable[[Any], Any] | None = None) -> Callable:
        """A handler (taking the engine) that records `label` with the counters, then runs `action(engine)`."""

        def handler(engine: Any) -> None:
            self.trace.append((label, engine.state.epoch, engine.state.iteration))
            if action is not None:
                action(engine)

        return handler

    def on(self, event: Any, label: str, action: Callable[[Any], Any] | None = None) -> Any:
        """Attach `mark(label, action)` to `event`; returns the handle."""
        return self.engine.add_event_handler(event, self.mark(label, action))

    # ------------------------------------------------------------------------------------------------- runs
    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Call `engine.run(*args, **kwargs)` and record its outcome and the warnings it raised."""
        if self.crashed:
            # What run() does after a run died of an exception differs on purpose: Ignite returns None once and
            # then restarts with a stale epoch; tracktrain resumes the broken epoch (tests/engine/test_engine.py
            # pins that). Parity is compared up to the crash.
            self.trace.append(("NOT_RUN_AFTER_CRASH",))
            return None
        start = len(self.trace)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                result = self.engine.run(*args, **kwargs)
            except Exception as e:
                # events recorded during this call: the run had started, so this is a crash, not bad arguments
                self.crashed = len(self.trace) > start
                self.trace.append(("RAISED", Raised.of(e, self.lib)))
                result = e
            else:
                self.trace.append(("RETURNED", "state" if result is self.engine.state else plain(result)))
        for w in caught:
            if DRY_ITERATOR_WARNING in str(w.message):
                self.warnings.append(f"{w.category.__name__}: {DRY_ITERATOR_WARNING}")
                self.trace.append(("WARNING", w.category.__name__))
        self.trace.append(("STATE",) + self.counters())
        return result

    def run_until_completed(self, *args: Any, max_calls: int = 20, **kwargs: Any) -> int:
        """Call `run` again and again (as after interrupt()) until COMPLETED fires; returns the number of calls."""
        for calls in range(1, max_calls + 1):
            start = len(self.trace)
            self.run(*args, **kwargs)
            if any(entry[0] in ("COMPLETED", "RAISED") for entry in self.trace[start:]):
                return calls
        raise AssertionError(f"{self.lib.name}: no COMPLETED after {max_calls} calls to run()")

    def counters(self) -> tuple:
        state = self.engine.state
        last = self.engine.last_event_name
        return (
            state.epoch,
            state.iteration,
            state.epoch_length,
            state.max_epochs,
            state.max_iters,
            getattr(last, "name", last),
        )

    def result(self) -> tuple:
        return (self.trace, self.counters(), self.warnings)


class Raised:
    """An exception as the traces record it: its type name and message, from one library.

    Two compare equal when the types match and tracktrain's message starts with Ignite's (issue 18: users and
    their tests match on Ignite's words; ours may go on with the value and the fix). Memory addresses in reprs
    are blanked, as they differ between any two objects.
    """

    def __init__(self, type_name: str, message: str, lib_name: str) -> None:
        self.type_name, self.message, self.lib_name = type_name, message, lib_name

    @classmethod
    def of(cls, error: BaseException, lib: Any) -> Raised:
        message = _ADDRESS.sub("0x?", str(error))
        if lib.name == "ignite":
            message = message.replace("<ignite.engine.engine.", "<tracktrain.engine.engine.")  # reprs of engines
            message = message.split(_IGNITE_TRACKER_HINT)[0]
        return cls(type(error).__name__, message, lib.name)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):  # a bare type name, as in `("RAISED", "ValueError") in trace`
            return self.type_name == other
        if not isinstance(other, Raised):
            return NotImplemented
        if self.type_name != other.type_name:
            return False
        if self.lib_name == other.lib_name:
            return self.message == other.message
        ours, theirs = (self, other) if self.lib_name == "tracktrain" else (other, self)
        # Ignite's last full stop may become ours' colon or a space before the value and the fix
        return ours.message.startswith(theirs.message.rstrip(". "))

    def __hash__(self) -> int:
        return hash(self.type_name)

    def __repr__(self) -> str:
        return f"{self.type_name}({self.message!r})"


_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
# Ignite's pointer to its own issue tracker, glued to one of its messages: not ours to repeat
_IGNITE_TRACKER_HINT = "If this is a desired behaviour, please open a feature request on"


def raised(fn: Callable[[], Any], lib: Any) -> Raised | None:
    """What `fn()` raises, as a `Raised` of `lib`; None when it returns."""
    try:
        fn()
    except Exception as e:
        return Raised.of(e, lib)
    return None


def run_both(scenario: Callable[[types.SimpleNamespace], Harness]) -> tuple[Harness, Harness]:
    """Run `scenario` on tracktrain and on ignite; returns (tracktrain harness, ignite harness)."""
    assert IGNITE is not None
    return scenario(TRACKTRAIN), scenario(IGNITE)


def assert_same(scenario: Callable[[types.SimpleNamespace], Harness]) -> tuple[Harness, Harness]:
    """Run `scenario` on both libraries and assert identical traces, final counters and warnings."""
    tt, ig = run_both(scenario)
    assert_traces_equal(tt.trace, ig.trace)
    assert tt.counters() == ig.counters()
    assert tt.warnings == ig.warnings
    return tt, ig


def assert_traces_equal(tt_trace: list, ig_trace: list) -> None:
    """`assert tt_trace == ig_trace` with a readable first difference."""
    if tt_trace == ig_trace:
        return
    for index, (a, b) in enumerate(zip(tt_trace, ig_trace)):
        if a != b:
            context = slice(max(0, index - 3), index + 3)
            raise AssertionError(
                f"traces differ at entry {index}: tracktrain {a!r} vs ignite {b!r}\n"
                f"  tracktrain around it: {tt_trace[context]!r}\n"
                f"  ignite around it:     {ig_trace[context]!r}"
            )
    raise AssertionError(
        f"traces differ in length: tracktrain {len(tt_trace)} vs ignite {len(ig_trace)}; "
        f"tracktrain tail {tt_trace[len(ig_trace) :][:6]!r}, ignite tail {ig_trace[len(tt_trace) :][:6]!r}"
    )


class Reiterable:
    """Iterable without __len__ that yields `values` afresh on every iter() (like an IterableDataset)."""

    def __init__(self, values: Iterable[Any]) -> None:
        self.values = list(values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values)


def failing_iterable(values: Iterable[Any], fail_at: int, exc_type: type[Exception] = KeyError) -> Any:
    """Generator yielding `values` and raising `exc_type` when asked for item `fail_at` (0-based)."""

    def gen() -> Iterator[Any]:
        for index, value in enumerate(values):
            if index == fail_at:
                raise exc_type(f"data failed at {index}")
            yield value

    class _Data:
        def __iter__(self) -> Iterator[Any]:
            return gen()

        def __len__(self) -> int:
            return len(list(values))

    return _Data()
