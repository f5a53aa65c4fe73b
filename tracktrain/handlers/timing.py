"""`Timer`: total or average wall-clock time between Engine events (Ignite's Timer).

Ignite's face of the one stopwatch, `tracktrain.handlers.multi_timer.StopWatch`, which the Trainer's face
(`tracktrain.callbacks.Timing`, through a `MultiTimer`) and Colossal-AI's timing hook use too: each stretch between a
resume and a pause is one interval of the watch, the total is the sum of its history (exact, however many intervals),
and the Ignite habits are kept here: pausing a paused timer or resuming a running one does nothing, `step()` counts
the units of work the average divides by, and every method ignores the arguments an event handler is called with.
"""

from __future__ import annotations

from typing import Any

from tracktrain.engine.engine import Engine
from tracktrain.engine.events import Events
from tracktrain.handlers.multi_timer import StopWatch

__all__ = ["Timer"]


class Timer:
    """Measures time while running; `value()` is the total, or the total per `step()` with `average=True`.

    The timer starts running as soon as it is created or `reset()`. `pause()` stops the clock and `resume()`
    restarts it, so only the time between resume and pause counts; `step()` counts one unit of work for the
    average. All four ignore the arguments they are called with, so they can be used as event handlers.

    Attributes:
        total: seconds measured up to the last `pause()` (`value()` adds the running part).
        step_count: number of `step()` calls since the last reset.
        running: whether the clock is running.

    .. code-block:: python

        # average time of one iteration's processing, without the time spent between iterations
        timer = Timer(average=True)
        timer.attach(
            trainer,
            start=Events.EPOCH_STARTED,
            resume=Events.ITERATION_STARTED,
            pause=Events.ITERATION_COMPLETED,
            step=Events.ITERATION_COMPLETED,
        )
    """

    step_count: int

    def __init__(self, average: bool = False) -> None:
        self._average = bool(average)
        self._watch = StopWatch("Timer")
        self.reset()

    @property
    def total(self) -> float:
        return self._watch.get_history_sum()

    @property
    def running(self) -> bool:
        return self._watch.is_running

    def attach(
        self,
        engine: Engine,
        start: Any = Events.STARTED,
        pause: Any = Events.COMPLETED,
        resume: Any | None = None,
        step: Any | None = None,
    ) -> Timer:
        """Drive the timer by `engine`'s events: reset on `start`, pause on `pause`, and if given resume on
        `resume` and count a step on `step`. Returns the timer."""
        if not isinstance(engine, Engine):
            raise TypeError(f"Timer.attach needs an Engine, got {engine!r} of type {type(engine).__name__}.")
        engine.add_event_handler(start, self.reset)
        engine.add_event_handler(pause, self.pause)
        if resume is not None:
            engine.add_event_handler(resume, self.resume)
        if step is not None:
            engine.add_event_handler(step, self.step)
        return self

    def reset(self, *args: Any) -> Timer:
        """Zero the total and the step count and start the clock."""
        self._watch.reset()
        self._watch.start()
        self.step_count = 0
        return self

    def pause(self, *args: Any) -> None:
        """Stop the clock, adding the time since it was last started to the total; no-op when paused."""
        if self._watch.is_running:
            self._watch.stop(keep_in_history=True)

    def resume(self, *args: Any) -> None:
        """Start the clock again after `pause()`; no-op while it runs."""
        if not self._watch.is_running:
            self._watch.start()

    def value(self) -> float:
        """Seconds measured so far (including the running part); per step with `average=True` (a timer with
        no steps yet divides by 1)."""
        total = self._watch.get_history_sum() + self._watch.running_seconds()
        if self._average:
            return total / max(self.step_count, 1)
        return total

    def step(self, *args: Any) -> None:
        """Count one unit of work for the average."""
        self.step_count += 1
