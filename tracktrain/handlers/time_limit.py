"""`TimeLimit` (Ignite's `ignite.handlers.time_limit`): stop the engine once it has run for a time."""

from __future__ import annotations

import logging
import time

from tracktrain.engine.engine import Engine

__all__ = ["TimeLimit"]


class TimeLimit:
    """Terminates the engine it is attached to (at ITERATION_COMPLETED, say) once `limit_sec` seconds have passed
    since the handler was made. The Trainer's own is `Trainer(max_time=...)`."""

    def __init__(self, limit_sec: int | None = 28800) -> None:
        if isinstance(limit_sec, bool) or not isinstance(limit_sec, int):
            raise TypeError(f"Argument limit_sec should be an integer, got {limit_sec!r}.")
        if limit_sec <= 0:
            raise ValueError(f"Argument limit_sec should be a positive integer, got {limit_sec}.")
        self.limit_sec = limit_sec
        self.start_time = time.monotonic()
        self.logger = logging.getLogger(f"{__name__}.{type(self).__name__}")

    def __call__(self, engine: Engine) -> None:
        if time.monotonic() - self.start_time > self.limit_sec:
            self.logger.info("Reached the time limit: %s sec. Stop training", self.limit_sec)
            engine.terminate()
