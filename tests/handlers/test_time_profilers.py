"""Ignite's time profilers (`tracktrain.handlers.time_profilers`): the same results, rows and CSV columns as Ignite
0.5.5's for the same run, the times measured where the work is, and the engine's handlers as they were afterwards."""

from __future__ import annotations

import time

import pytest

import tracktrain.engine as our_engine
import tracktrain.handlers as our_handlers
from tracktrain.engine import Engine, Events
from tracktrain.handlers import BasicTimeProfiler, HandlersTimeProfiler

ignite_engine = pytest.importorskip("ignite.engine")
ignite_handlers = pytest.importorskip("ignite.handlers")

STEP, HANDLER, EPOCH_HANDLER = 0.004, 0.002, 0.003


def profiled_run(engine_module, handlers_module):
    def step(engine, batch):
        time.sleep(STEP)
        return batch

    engine = engine_module.Engine(step)
    events = engine_module.Events

    def log_every_other(engine):
        time.sleep(HANDLER)

    def at_epoch_end():
        time.sleep(EPOCH_HANDLER)

    engine.add_event_handler(events.ITERATION_COMPLETED(every=2), log_every_other)
    basic, per_handler = handlers_module.BasicTimeProfiler(), handlers_module.HandlersTimeProfiler()
    basic.attach(engine)
    per_handler.attach(engine)
    engine.add_event_handler(events.EPOCH_COMPLETED, at_epoch_end)  # attached after the profilers: timed too
    engine.run(range(6), max_epochs=2)
    return engine, basic, per_handler, log_every_other


def test_basic_profiler_results_as_ignites():
    _, theirs, _, _ = profiled_run(ignite_engine, ignite_handlers)
    engine, ours, _, _ = profiled_run(our_engine, our_handlers)
    mine, their = ours.get_results(), theirs.get_results()
    assert list(mine) == list(their)
    assert list(mine["event_handlers_stats"]) == list(their["event_handlers_stats"])
    assert list(mine["processing_stats"]) == list(their["processing_stats"])
    # without the profilers' own handlers (Ignite's HandlersTimeProfiler adds Timer.reset ones)
    user = {
        key: [n for n in names if "Profiler" not in n and "Timer." not in n]
        for key, names in their["event_handlers_names"].items()
    }
    assert mine["event_handlers_names"] == user
    # where the time goes: the step in processing, the handlers in their events
    processing = mine["processing_stats"]
    assert processing["total"] >= 12 * STEP and processing["min/index"][0] >= STEP
    assert processing["max/index"][0] < STEP + 0.05
    completed = ours.event_handlers_times[Events.ITERATION_COMPLETED]
    assert [bool(t >= HANDLER) for t in completed.tolist()] == [i % 2 == 1 for i in range(12)]
    assert all(t >= EPOCH_HANDLER for t in ours.event_handlers_times[Events.EPOCH_COMPLETED].tolist())
    assert "Processing function:" in ours.print_results(mine)


def test_handlers_profiler_rows_as_ignites(tmp_path):
    _, _, theirs, _ = profiled_run(ignite_engine, ignite_handlers)
    engine, _, ours, log = profiled_run(our_engine, our_handlers)
    mine = ours.get_results()
    their = [row for row in theirs.get_results() if "Profiler" not in row[0]]
    assert [(row[0], row[1]) for row in mine] == [(row[0], row[1]) for row in their]
    log_row = next(row for row in mine if row[0].endswith("log_every_other"))
    assert len(ours.event_handlers_times[Events.ITERATION_COMPLETED][log_row[0]]) == 6  # only the calls that ran
    assert log_row[2] >= 6 * HANDLER
    assert mine[-2][0] == "Processing" and mine[-2][2] >= 12 * STEP
    ours.print_results(mine)
    for profiler, name in ((ours, "ours.csv"), (theirs, "theirs.csv")):
        profiler.write_results(tmp_path / name)
    mine_header = (tmp_path / "ours.csv").read_text().splitlines()[0].split(",")
    their_header = [h for h in (tmp_path / "theirs.csv").read_text().splitlines()[0].split(",") if "Profiler" not in h]
    assert mine_header == their_header

    # the run is over: the handlers are the engine's own again
    assert engine.has_event_handler(log, Events.ITERATION_COMPLETED)
    engine.remove_event_handler(log, Events.ITERATION_COMPLETED)
    assert not engine.has_event_handler(log)


def test_wrapped_handlers_are_found_and_removed_by_themselves():
    engine = Engine(lambda e, b: None)
    calls = []

    def handler(engine):
        calls.append("handler")

    engine.add_event_handler(Events.ITERATION_COMPLETED, handler)

    def wrapper(event, inner):
        def wrapped(*args, **kwargs):
            calls.append(f"before {event}")
            return inner(*args, **kwargs)

        return wrapped

    unwrap = engine.wrap_event_handlers(wrapper, owner="me")
    again = engine.wrap_event_handlers(wrapper, owner="me")  # nothing new to wrap for this owner
    engine.run([0], max_epochs=1)
    assert calls == ["before ITERATION_COMPLETED", "handler"]
    assert engine.has_event_handler(handler, Events.ITERATION_COMPLETED)
    again()
    unwrap()
    calls.clear()
    engine.run([0], max_epochs=1)
    assert calls == ["handler"]
    engine.wrap_event_handlers(wrapper, owner="me")
    engine.remove_event_handler(handler, Events.ITERATION_COMPLETED)
    assert not engine.has_event_handler(handler)


def test_attach_refuses_what_is_not_an_engine_and_needs_an_epoch_length():
    with pytest.raises(TypeError, match="Argument engine should be ignite.engine.Engine"):
        BasicTimeProfiler().attach("engine")
    with pytest.raises(TypeError, match="Argument engine should be ignite.engine.Engine"):
        HandlersTimeProfiler().attach(None)
    engine = Engine(lambda e, b: None)
    BasicTimeProfiler().attach(engine)
    with pytest.raises(ValueError, match="As epoch_length is not set, we can not use BasicTimeProfiler"):
        engine.run(iter([1, 2]), max_epochs=1)
