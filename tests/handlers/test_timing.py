"""Timer: totals, pauses, averages over steps, driven directly and by Engine events; compared with Ignite's."""

from __future__ import annotations

import time

import pytest

from tracktrain.engine import Engine, Events
from tracktrain.handlers import Timer

WORK = 0.008  # seconds of fake work per iteration
IDLE = 0.008  # seconds spent in handlers between iterations


def sleeping_engine(engine_cls=Engine, events=Events):
    engine = engine_cls(lambda e, b: time.sleep(WORK))
    engine.add_event_handler(events.ITERATION_COMPLETED, lambda _: time.sleep(IDLE))
    return engine


def test_total_time_of_a_run():
    engine = sleeping_engine()
    timer = Timer().attach(engine)  # STARTED -> COMPLETED
    engine.run(range(5), max_epochs=2)
    assert not timer.running
    assert 10 * (WORK + IDLE) <= timer.value() < 10 * (WORK + IDLE) + 0.5
    frozen = timer.value()
    time.sleep(0.01)
    assert timer.value() == frozen  # paused at COMPLETED


def test_average_processing_time_excludes_time_between_iterations():
    engine = Engine(lambda e, b: time.sleep(WORK))
    timer = Timer(average=True).attach(
        engine,
        start=Events.EPOCH_STARTED,
        resume=Events.ITERATION_STARTED,
        pause=Events.ITERATION_COMPLETED,
        step=Events.ITERATION_COMPLETED,
    )
    # attached after the timer, so it runs after the pause
    engine.add_event_handler(Events.ITERATION_COMPLETED, lambda _: time.sleep(IDLE))
    engine.run(range(6), max_epochs=1)
    assert timer.step_count == 6
    assert WORK <= timer.value() < WORK + IDLE / 2 + 0.02


def test_average_per_epoch_restarts_each_epoch():
    engine = Engine(lambda e, b: time.sleep(WORK))
    timer = Timer(average=True).attach(
        engine, start=Events.EPOCH_STARTED, pause=Events.EPOCH_COMPLETED, step=Events.ITERATION_COMPLETED
    )
    seen = []
    engine.add_event_handler(Events.EPOCH_COMPLETED, lambda: seen.append((timer.step_count, timer.value())))
    engine.run(range(3), max_epochs=3)
    assert [steps for steps, _ in seen] == [3, 3, 3]
    for _, average in seen:
        assert WORK <= average < WORK + 0.03


def test_direct_use_pause_resume_step_reset():
    timer = Timer()
    assert timer.running
    time.sleep(0.01)
    timer.pause()
    paused_total = timer.total
    assert 0.01 <= paused_total < 0.2
    time.sleep(0.02)  # not counted
    assert timer.value() == paused_total
    timer.pause()  # no-op when paused
    assert timer.total == paused_total
    timer.resume()
    time.sleep(0.01)
    running_value = timer.value()
    assert paused_total + 0.01 <= running_value < paused_total + 0.2
    assert timer.value() >= running_value  # keeps growing while running
    timer.resume()  # no-op while running: does not restart the clock
    assert timer.value() >= running_value
    assert timer.reset() is timer
    assert timer.total == 0.0 and timer.step_count == 0 and timer.value() < 0.01


def test_average_divides_by_steps_and_by_one_before_any():
    timer = Timer(average=True)
    time.sleep(0.01)
    timer.pause()
    total = timer.total
    assert timer.value() == total  # no steps yet
    for _ in range(4):
        timer.step()
    assert timer.value() == pytest.approx(total / 4)


def test_attach_rejects_a_non_engine():
    with pytest.raises(TypeError, match="needs an Engine"):
        Timer().attach(object())


def test_same_semantics_as_ignite():
    pytest.importorskip("ignite")
    from ignite.engine import Engine as IgniteEngine
    from ignite.engine import Events as IgniteEvents
    from ignite.handlers import Timer as IgniteTimer

    def scenario(engine_cls, events, timer_cls):
        engine = sleeping_engine(engine_cls, events)
        total = timer_cls().attach(engine)
        per_iteration = timer_cls(average=True).attach(
            engine, start=events.EPOCH_STARTED, pause=events.EPOCH_COMPLETED, step=events.ITERATION_COMPLETED
        )
        epoch_only = timer_cls().attach(engine, start=events.EPOCH_STARTED, pause=events.EPOCH_COMPLETED)
        engine.run(range(4), max_epochs=2)
        return [(float(t.step_count), t.running, t.value()) for t in (total, per_iteration, epoch_only)]

    ours = scenario(Engine, Events, Timer)
    theirs = scenario(IgniteEngine, IgniteEvents, IgniteTimer)
    for (our_steps, our_running, our_value), (steps, running, value) in zip(ours, theirs):
        assert (our_steps, our_running) == (steps, running)
        assert our_value == pytest.approx(value, rel=0.5, abs=0.02)
