"""`LoggerBridge`: the one callback between a Trainer and its loggers.

It starts (or resumes) each logger's run when fit starts, logs the hyperparameters once, forwards what the
Trainer publishes (`Trainer.publish` calls `log_metrics`), asks for delivery at each epoch's end, uploads saved
checkpoints to the loggers that want them, and ends the runs: FINISHED, FAILED on an exception, KILLED on
pre-emption (SIGTERM/SIGUSR1, see `tracktrain.preemption`) or Ctrl-C. Only rank 0 talks to trackers: one run per training job, not per process. The run ids are
saved in checkpoints, so a resumed fit continues the same runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tracktrain.callbacks.base import Callback
from tracktrain.loggers.base import CHECKPOINT_ARTIFACTS, Logger
from tracktrain.preemption import Terminated
from tracktrain.ranks import global_rank

if TYPE_CHECKING:
    from tracktrain.trainer.module import LoopModule
    from tracktrain.trainer.trainer import Trainer

__all__ = ["LoggerBridge", "Terminated"]


class LoggerBridge(Callback):
    priority = -1000  # runs start before any other hook can log

    def __init__(self, loggers: list[Logger]) -> None:
        self.loggers = loggers
        self._resume_ids: dict[str, str] = {}
        self.active = False

    @property
    def state_key(self) -> str:
        return "LoggerBridge"

    # ----------------------------------------------------------------------------------------------- hooks
    def on_fit_start(self, trainer: Trainer, module: LoopModule) -> None:
        self.active = global_rank() == 0
        if not self.active:
            return
        for logger in self.loggers:
            resumed = logger.name in self._resume_ids
            if resumed:
                logger.resume(self._resume_ids[logger.name])
            logger.start(trainer.default_root_dir)
            if not resumed:
                logger.log_hyperparams(trainer.settings)
            elif trainer.resume_changes:  # params are the run's first settings (MLflow's cannot change): tags say what did
                logger.set_tags(_change_tags(trainer.resume_changes, trainer.global_step))
            watch = getattr(logger, "watch_module", None)
            if callable(watch):  # trackers that follow gradients / parameters (W&B's watch)
                watch(module)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        if self.active:
            for logger in self.loggers:
                logger.log_metrics(metrics, step)

    def persist(self) -> None:
        """Make what the loggers hold durable (spilled to disk) before a checkpoint commits: a run killed after the
        commit resumes past these steps and would never log them again; from the spill file they are delivered
        when the run (or `replay`) continues."""
        if self.active:
            for logger in self.loggers:
                persist = getattr(logger, "persist", None)
                if callable(persist):
                    persist()

    def checkpoint_saved(self, path: str, step: int | None = None) -> None:
        if self.active:
            for logger in self.loggers:
                if getattr(logger, "log_checkpoints", False):
                    logger.log_artifact(path, CHECKPOINT_ARTIFACTS, step=step)

    def on_train_epoch_end(self, trainer: Trainer, module: LoopModule) -> None:
        if self.active:
            for logger in self.loggers:
                logger.flush()

    def on_fit_end(self, trainer: Trainer, module: LoopModule) -> None:
        if self.active:
            for logger in self.loggers:
                log_final_model = getattr(logger, "log_final_model", None)
                if callable(log_final_model):  # trackers that keep the trained model (MLflow's log_model)
                    log_final_model(module)
        self._end("FINISHED")

    def on_exception(self, trainer: Trainer, module: LoopModule, exception: BaseException) -> None:
        self._end("KILLED" if isinstance(exception, (Terminated, KeyboardInterrupt)) else "FAILED")

    def _end(self, status: str) -> None:
        if not self.active:
            return
        self.active = False
        for logger in self.loggers:
            logger.finalize(status)

    # ----------------------------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        return {"run_ids": {logger.name: logger.run_id for logger in self.loggers if logger.run_id is not None}}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self._resume_ids = dict(state_dict.get("run_ids", {}))


def _change_tags(changes: Mapping[str, tuple[Any, Any]], step: int) -> dict[str, str]:
    """One tag per setting changed when the run was resumed: `tracktrain.changed.trainer/max_epochs`:
    `5 -> 10 (resumed at step 230)`."""
    return {f"tracktrain.changed.{key}": f"{old!r} -> {new!r} (resumed at step {step})"
            for key, (old, new) in changes.items()}
