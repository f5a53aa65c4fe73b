"""`TrackerRuns`: the one lifecycle of a training job's tracker runs, shared by the Trainer's `LoggerBridge` and the
Engine's `attach_loggers`.

start (new, or resumed from a checkpoint's run ids) → log (metrics, checkpoints) → flush / persist (the outage
buffer: each `QueuedLogger` keeps what its tracker has not taken) → finish with one status. Only rank 0 talks to
trackers (one run per training job, not per process): on other ranks every call here does nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tracktrain.distributed.preemption import Terminated
from tracktrain.distributed.ranks import global_rank
from tracktrain.loggers.base import CHECKPOINT_ARTIFACTS, Logger

__all__ = ["TrackerRuns", "status_of"]


def status_of(exception: BaseException | None) -> str:
    """How a run that ended with `exception` is marked: FINISHED without one, KILLED on pre-emption (SIGTERM /
    SIGUSR1, see `tracktrain.distributed.preemption`) or Ctrl-C, else FAILED."""
    if exception is None:
        return "FINISHED"
    return "KILLED" if isinstance(exception, (Terminated, KeyboardInterrupt)) else "FAILED"


class TrackerRuns:
    """The runs of `loggers` (the list itself is kept: a callback may add a logger to it while a fit runs).

    `resume_ids` ({logger's tracker: run id}, from a checkpoint) makes `start` continue those runs; `run_ids` is what a
    checkpoint saves.
    """

    def __init__(self, loggers: Sequence[Logger]) -> None:
        self.loggers = loggers
        self.resume_ids: dict[str, str] = {}
        self.active = False

    def start(
        self,
        root_dir: str,
        params: Mapping[str, Any] | None = None,
        changed_tags: Mapping[str, str] | None = None,
        module: Any = None,
    ) -> None:
        """Open each logger's run under `root_dir` (rank 0 only). A new run gets `params`; a resumed one keeps its
        first params (MLflow's cannot change) and gets `changed_tags` instead. `module` is shown to trackers that
        follow gradients (`Logger.watch_module`)."""
        self.active = global_rank() == 0
        if not self.active:
            return
        for logger in self.loggers:
            resumed = logger.tracker in self.resume_ids
            if resumed:
                logger.resume(self.resume_ids[logger.tracker])
            logger.start(root_dir)
            if not resumed and params is not None:
                logger.log_hyperparams(params)
            elif resumed and changed_tags:
                logger.set_tags(changed_tags)
            if module is not None:
                logger.watch_module(module)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        if self.active:
            for logger in self.loggers:
                logger.log_metrics(metrics, step)

    def checkpoint_saved(self, path: str, step: int | None = None) -> None:
        """Announce a committed checkpoint to the loggers that keep them (`Logger.log_checkpoints`)."""
        if self.active:
            for logger in self.loggers:
                if logger.log_checkpoints:
                    logger.log_artifact(path, CHECKPOINT_ARTIFACTS, step=step)

    def log_artifact(self, path: str, artifact_path: str | None, step: int | None = None) -> None:
        """Send the file `path` to every logger (a profiler trace, a plot), while the runs are open."""
        if self.active:
            for logger in self.loggers:
                logger.log_artifact(path, artifact_path, step=step)

    def flush(self) -> None:
        """Ask for delivery of what is queued (each logger waits at most its own `flush_timeout`)."""
        if self.active:
            for logger in self.loggers:
                logger.flush()

    def persist(self) -> None:
        """Make what the loggers hold durable before a checkpoint commits: a run killed after the commit resumes past
        these steps and would never log them again; from the spill file they are delivered when the run (or
        `replay`) continues."""
        if self.active:
            for logger in self.loggers:
                logger.persist()

    def finish(self, exception: BaseException | None = None, module: Any = None) -> None:
        """End every run once, as `status_of(exception)` says; on a good end, trackers that keep the trained model
        are given `module` first (`Logger.log_final_model`)."""
        if not self.active:
            return
        self.active = False
        if exception is None and module is not None:
            for logger in self.loggers:
                logger.log_final_model(module)
        status = status_of(exception)
        for logger in self.loggers:
            logger.finalize(status)

    @property
    def run_ids(self) -> dict[str, str]:
        return {logger.tracker: logger.run_id for logger in self.loggers if logger.run_id is not None}
