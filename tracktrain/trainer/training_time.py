"""How long a run has trained, counted over its resumes, and `Trainer(max_time=...)` (Lightning's) on it.

The time is saved with the Trainer's state in every checkpoint, so a job re-queued after 3 of its 4 hours trains one
more. The limit is one agreed decision at each step's end (`tracktrain.distributed.boundary`), taken on rank 0's clock, so every
rank stops at the same step; the stop is `trainer.stop(agreed=True)`: the epoch cut short still ends as the run's
last one (its end hooks, validation and checkpoints run).
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Callable, Mapping

from tracktrain.distributed.boundary import Boundary, Decision
from tracktrain.distributed.logger import get_dist_logger

__all__ = ["Duration", "TrainingTime", "duration_of"]

Duration = str | datetime.timedelta | Mapping[str, float]
_DAYS_HOURS_MINUTES_SECONDS = re.compile(r"(\d+):(\d+):(\d+):(\d+)")


def duration_of(max_time: Duration) -> datetime.timedelta:
    """`max_time` as Lightning takes it: "DD:HH:MM:SS", a `timedelta`, or a dict of its arguments
    (`{"hours": 4}`); a positive duration, or a ValueError/TypeError naming the accepted forms."""
    forms = 'a "DD:HH:MM:SS" string ("00:04:00:00"), a datetime.timedelta, or a dict such as {"hours": 4}'
    if isinstance(max_time, datetime.timedelta):
        duration = max_time
    elif isinstance(max_time, str):
        matched = _DAYS_HOURS_MINUTES_SECONDS.fullmatch(max_time.strip())
        if matched is None:
            raise ValueError(f"Trainer(max_time={max_time!r}) is not a duration: give {forms}.")
        days, hours, minutes, seconds = (int(part) for part in matched.groups())
        duration = datetime.timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    elif isinstance(max_time, Mapping):
        try:
            duration = datetime.timedelta(**max_time)
        except TypeError as error:
            raise ValueError(f"Trainer(max_time={dict(max_time)!r}): {error}; give {forms}.") from None
    else:
        raise TypeError(f"Trainer(max_time=...) takes {forms}; got {type(max_time).__name__} {max_time!r}.")
    if duration <= datetime.timedelta(0):
        raise ValueError(f"Trainer(max_time={max_time!r}) must be a positive duration, got {duration}.")
    return duration


class TrainingTime:
    """The run's training time (its training loops, the validation within them included), over all its resumes;
    `limit`: `Trainer(max_time=...)` as a timedelta, or None."""

    def __init__(self, max_time: Duration | None) -> None:
        self.limit = None if max_time is None else duration_of(max_time)
        self._before = 0.0  # seconds trained by the run before this process's current training loop
        self._started: float | None = None  # time.monotonic() when that loop started

    def elapsed(self) -> float:
        """Seconds the run has trained so far, its earlier processes included."""
        running = 0.0 if self._started is None else time.monotonic() - self._started
        return self._before + running

    def start(self) -> None:
        """A training loop starts (after a resume has loaded the time trained before it)."""
        self._started = time.monotonic()

    def pause(self) -> None:
        """The training loop ended (done, stopped or failed): a later fit of the Trainer goes on counting."""
        self._before, self._started = self.elapsed(), None

    def restart(self) -> None:
        """A new run starts: nothing trained yet."""
        self._before, self._started = 0.0, None

    def load(self, seconds: float) -> None:
        """The time trained that a resumed checkpoint recorded."""
        self._before = float(seconds)

    def decisions(self, step: Callable[[], int], stop: Callable[[], None]) -> list[Decision]:
        """With a limit: at each step's end, rank 0's clock decides for every rank whether to `stop()`."""
        limit = self.limit
        if limit is None:
            return []

        def act(agreed: float) -> None:
            if agreed:
                get_dist_logger().info(
                    f"max_time={limit} reached after {datetime.timedelta(seconds=round(self.elapsed()))} of training: "
                    f"stopping at step {step()}; the epoch's end hooks, validation and checkpoints still run."
                )
                stop()

        propose = lambda: self.elapsed() >= limit.total_seconds()  # noqa: E731
        return [Decision(Boundary.TRAIN_STEP_END, "max_time", propose=propose, agree="rank_zero", act=act)]
