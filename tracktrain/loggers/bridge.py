"""`LoggerBridge`: the one callback between a Trainer and its loggers, over their `TrackerRuns`.

It starts (or resumes) the runs when fit starts, with the Trainer's settings as hyperparameters, forwards what the
Trainer publishes (`log_metrics`), asks for delivery at each epoch's end, makes the queued records durable before a
checkpoint commits (`persist`), announces saved checkpoints (`checkpoint_saved`), and ends the runs: FINISHED,
FAILED on an exception, KILLED on pre-emption or Ctrl-C (see `runs.status_of`). The run ids are saved in
checkpoints, so a resumed fit continues the same runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tracktrain.distributed.preemption import Terminated
from tracktrain.loggers.base import Logger
from tracktrain.loggers.runs import TrackerRuns
from tracktrain.trainer.callback import Callback, CallbackPhase

if TYPE_CHECKING:
    from tracktrain.trainer.module import LoopModule
    from tracktrain.trainer.surface import TrainerSurface

__all__ = ["LoggerBridge", "Terminated"]


class LoggerBridge(Callback):
    """The callback that drives a Trainer's `loggers` through one `TrackerRuns`: starts or resumes the runs at the
    fit's start, forwards what the Trainer publishes, persists queued records before a checkpoint commits, and ends
    the runs with the fit's outcome. The Trainer adds it itself (`Trainer(loggers=[...])`)."""

    phase = CallbackPhase.FIRST  # runs start before any other hook can log

    def __init__(self, loggers: list[Logger]) -> None:
        self.loggers = loggers
        self.runs = TrackerRuns(loggers)

    @property
    def active(self) -> bool:
        """Whether the runs are open here (rank 0, between fit start and end)."""
        return self.runs.active

    @property
    def state_key(self) -> str:
        return "LoggerBridge"

    # ----------------------------------------------------------------------------------------------- hooks
    def on_fit_start(self, trainer: TrainerSurface, module: LoopModule) -> None:
        changes = trainer.resume_changes
        self.runs.start(
            trainer.default_root_dir,
            params=trainer.settings,
            module=module,
            changed_tags=_change_tags(changes, trainer.global_step) if changes else None,
        )

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.runs.log_metrics(metrics, step)

    def persist(self) -> None:
        self.runs.persist()

    def checkpoint_saved(self, path: str, step: int | None = None) -> None:
        self.runs.checkpoint_saved(path, step)

    def log_artifact(self, path: str, artifact_path: str | None, step: int | None = None) -> None:
        self.runs.log_artifact(path, artifact_path, step)

    def on_train_epoch_end(self, trainer: TrainerSurface, module: LoopModule) -> None:
        self.runs.flush()

    def on_fit_end(self, trainer: TrainerSurface, module: LoopModule) -> None:
        self.runs.finish(module=module)

    def on_exception(self, trainer: TrainerSurface, module: LoopModule, exception: BaseException) -> None:
        self.runs.finish(exception)

    # ----------------------------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        return {"run_ids": self.runs.run_ids}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self.runs.resume_ids = dict(state_dict.get("run_ids", {}))


def _change_tags(changes: Mapping[str, tuple[Any, Any]], step: int) -> dict[str, str]:
    """One tag per setting changed when the run was resumed: `tracktrain.changed.trainer/max_epochs`:
    `5 -> 10 (resumed at step 230)`."""
    return {
        f"tracktrain.changed.{key}": f"{old!r} -> {new!r} (resumed at step {step})"
        for key, (old, new) in changes.items()
    }
