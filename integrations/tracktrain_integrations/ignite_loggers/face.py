"""`TrackerFace`: one of tracktrain's loggers under Ignite's `BaseLogger` API. Its run opens when the face is made
(as Ignite's loggers open theirs) and ends FINISHED at `close()`, or at the interpreter's exit when `close()` was
never called; only rank 0 talks to the tracker (`TrackerRuns`)."""

from __future__ import annotations

import atexit
import os
from collections.abc import Mapping
from typing import Any

from tracktrain.handlers.base_logger import BaseLogger
from tracktrain.loggers.base import Logger
from tracktrain.loggers.runs import TrackerRuns
from tracktrain.trainer.metric_log import to_floats

__all__ = ["TrackerFace"]


class TrackerFace(BaseLogger):
    """Ignite's logger API over `tracker`, whose run starts now, under `root_dir` (where it keeps its files)."""

    def __init__(self, tracker: Logger, root_dir: str | os.PathLike = ".") -> None:
        self.tracker = tracker
        self._runs = TrackerRuns([tracker])
        self._runs.start(os.fspath(root_dir))
        atexit.register(self.close)

    def write_scalars(self, values: Mapping[str, Any], step: int) -> None:
        numbers = {name: value for name, value in values.items() if not isinstance(value, str)}
        if numbers:
            self._runs.log_metrics(to_floats(numbers), step)  # one host sync for all of them

    def close(self) -> None:
        """End the run (FINISHED), after delivering what is queued (what the tracker does not take in time stays in
        the logger's spill file, to replay)."""
        atexit.unregister(self.close)
        self._runs.finish()
