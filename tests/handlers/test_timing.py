"""Timer: totals, pauses, averages over steps, driven directly and by Engine events; compared with Ignite's.

No assert here depends on how fast the machine is: a timed span must hold at least the sleeps inside it and at most
the wall time measured around it, a paused timer must not move at all, and what a timer leaves out is checked by
reading it before and after the left-out part."""

from __future__ import annotations

import time
from time import perf_counter

import pytest

from tracktrain.engine import Engine, Events
from tracktrain.handlers import Timer

WORK = 0.008  # seconds of fake work per iteration
IDLE = 0.008  # seconds spent in handlers between iterations


def sleeping_engine(engine_cls=Engine, events=Events):
    engine = engine_cls(lambda e, b: time.sleep(WORK))
    engine.add_event_handler(events.ITERATION_COMPLETED, lambda _: time.sleep(IDLE))
    return engine


def timed_run(engine, *args, **kwargs) -> float:
    """`engine.run(...)`, returning the wall seconds it took."""
    started = perf_counter()
    engine.run(*args, **kwargs)
    return perf_counter() - started


def test_total_time_of_a_run():
    engine = sleeping_engine()
    timer = Timer().attach(engine)  # STARTED -> COMPLETED
    wall = timed_run(engine, range(5), max_epochs=2)
    assert not timer.running
    assert 10 * (WORK + IDLE) <= timer.value() <= wall  # every sleep, within the run
    frozen = timer.value()
    time.sleep(0.01)
    assert timer.value() == frozen  # paused at COMPLETED


def test_average_processing_time_excludes_time_between_iterations():
    work: list[float] = []

    def process(engine, batch):
        started = perf_counter()
        time.sleep(WORK)
        work.append(perf_counter() - started)

    engine = Engine(process)
    timer = Timer(average=True).attach(
        engine,
        start=Events.EPOCH_STARTED,
        resume=Events.ITERATION_STARTED,
        pause=Events.ITERATION_COMPLETED,
        step=Events.ITERATION_COMPLETED,
    )
    idle: list[float] = []

    def between_iterations():  # attached after the timer, so it runs after the pause: the timer must not move
        before, started = (timer.running, timer.total), perf_counter()
        time.sleep(IDLE)
        idle.append(perf_counter() - started)
        assert before[0] is False and (timer.running, timer.total) == before

    engine.add_event_handler(Events.ITERATION_COMPLETED, between_iterations)
    wall = timed_run(engine, range(6), max_epochs=1)
    assert timer.step_count == 6 and len(idle) == 6
    assert timer.value() == timer.total / 6
    # the timed spans hold every iteration's work and lie outside every idle span, all within the run
    assert sum(work) <= timer.total <= wall - sum(idle)


def test_average_per_epoch_restarts_each_epoch():
    engine = Engine(lambda e, b: time.sleep(WORK))
    opened: list[float] = []
    engine.add_event_handler(Events.EPOCH_STARTED, lambda: opened.append(perf_counter()))  # before the timer starts
    timer = Timer(average=True).attach(
        engine, start=Events.EPOCH_STARTED, pause=Events.EPOCH_COMPLETED, step=Events.ITERATION_COMPLETED
    )
    seen = []  # after the timer pauses: (steps, average, the epoch's wall time around the timer's span)
    engine.add_event_handler(
        Events.EPOCH_COMPLETED, lambda: seen.append((timer.step_count, timer.value(), perf_counter() - opened[-1]))
    )
    engine.run(range(3), max_epochs=3)
    assert [steps for steps, _, _ in seen] == [3, 3, 3]
    for _, average, epoch_wall in seen:
        # this epoch's 3 sleeps, and nothing of the epochs before (each epoch's wall holds only its own time)
        assert 3 * WORK <= 3 * average <= epoch_wall


def test_direct_use_pause_resume_step_reset():
    before = perf_counter()
    timer = Timer()
    assert timer.running
    time.sleep(0.01)
    timer.pause()
    paused_total = timer.total
    assert 0.01 <= paused_total <= perf_counter() - before
    time.sleep(0.02)  # not counted
    assert timer.value() == paused_total
    timer.pause()  # no-op when paused
    assert timer.total == paused_total
    resumed_at = perf_counter()
    timer.resume()
    time.sleep(0.01)
    running_value = timer.value()
    assert paused_total + 0.01 <= running_value <= paused_total + (perf_counter() - resumed_at)
    assert timer.value() >= running_value  # keeps growing while running
    timer.resume()  # no-op while running: does not restart the clock
    assert timer.value() >= running_value
    reset_at = perf_counter()
    assert timer.reset() is timer
    assert timer.total == 0.0 and timer.step_count == 0 and timer.running
    assert timer.value() <= perf_counter() - reset_at  # counts from the reset, not from before it


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
        wall = timed_run(engine, range(4), max_epochs=2)
        return [(float(t.step_count), t.running, t.value()) for t in (total, per_iteration, epoch_only)], wall

    ours, our_wall = scenario(Engine, Events, Timer)
    theirs, their_wall = scenario(IgniteEngine, IgniteEvents, IgniteTimer)
    # each timer counts what it should of its own run: the sleeps it spans at least, its run's wall time at most
    # (so the two libraries agree whatever the machine's load does to either run)
    least = [8 * (WORK + IDLE), WORK + IDLE, 4 * (WORK + IDLE)]  # the run; per iteration of an epoch; an epoch
    for timers, wall in ((ours, our_wall), (theirs, their_wall)):
        for (steps, _, value), lower in zip(timers, least):
            assert lower <= value and value * max(steps, 1) <= wall
    assert [(steps, running) for steps, running, _ in ours] == [(steps, running) for steps, running, _ in theirs]
