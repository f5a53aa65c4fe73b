"""`Trainer(max_time=...)` (Lightning's): a fit stops once its training has run that long, counted over the run's
resumes — the time spent so far is saved in each checkpoint, so a job re-queued after 3 of its 4 hours trains one
more. Stopping is `trainer.stop(agreed=True)` at a step's end, decided on rank 0's clock and taken by every rank at
the same step: the epoch cut short still ends as the run's last one (its end hooks, validation, checkpoints run).
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tracktrain.boundary import Boundary, Decision
from tracktrain.callbacks.base import Callback
from tracktrain.dist_logger import get_dist_logger

if TYPE_CHECKING:
    from tracktrain.trainer.module import LoopModule
    from tracktrain.trainer.trainer import Trainer

__all__ = ["TimeLimit", "duration_of"]

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


class TimeLimit(Callback):
    """Stops the fit once `duration` of training (validation within it included) has passed, over all its resumes.
    Added by `Trainer(max_time=...)`."""

    def __init__(self, duration: Duration) -> None:
        self.duration = duration_of(duration)
        self._before = 0.0  # seconds trained by the run before this process resumed it
        self._started: float | None = None  # time.monotonic() when this process's training started

    def elapsed(self) -> float:
        """Seconds the run has trained so far, its earlier processes included."""
        running = 0.0 if self._started is None else time.monotonic() - self._started
        return self._before + running

    def on_train_start(self, trainer: Trainer, module: LoopModule) -> None:
        self._started = time.monotonic()

    def on_train_end(self, trainer: Trainer, module: LoopModule) -> None:
        self._before, self._started = self.elapsed(), None  # a later fit of this Trainer goes on counting

    def decisions(self, trainer: Trainer) -> Iterable[Decision]:
        """At each step's end, rank 0's clock decides for every rank (no rank stops a step before another)."""
        return [
            Decision(
                Boundary.TRAIN_STEP_END,
                "max_time",
                propose=lambda: self.elapsed() >= self.duration.total_seconds(),
                agree="rank_zero",
                act=lambda agreed: self._stop(trainer, agreed),
            )
        ]

    def _stop(self, trainer: Trainer, agreed: float) -> None:
        if not agreed:
            return
        get_dist_logger().info(
            f"max_time={self.duration} reached after {datetime.timedelta(seconds=round(self.elapsed()))} of training: "
            f"stopping at step {trainer.global_step}, the epoch's end hooks, validation and checkpoints still run."
        )
        trainer.stop(agreed=True)

    def state_dict(self) -> dict[str, Any]:
        return {"time_elapsed": self.elapsed()}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self._before = float(state_dict["time_elapsed"])
