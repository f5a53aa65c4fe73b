"""`LoggerBridge`: the one callback between a Trainer and its loggers.

It starts (or resumes) each logger's run when fit starts, logs the hyperparameters once, forwards what the
Trainer publishes (`Trainer._publish` calls `log_metrics`), asks for delivery at each epoch's end, uploads saved
checkpoints to the loggers that want them, and ends the runs: FINISHED, FAILED on an exception, KILLED on
pre-emption (SIGTERM/SIGUSR1, see `tracktrain.preemption`) or Ctrl-C. Only rank 0 talks to trackers: one run per training job, not per process. The run ids are
saved in checkpoints, so a resumed fit continues the same runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tracktrain.callbacks.base import Callback
from tracktrain.loggers.base import Logger
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
            if logger.name in self._resume_ids:
                logger.resume(self._resume_ids[logger.name])
            logger.start(trainer.default_root_dir)
            logger.log_hyperparams(_hyperparameters(trainer, module))
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
                    logger.log_artifact(path, "checkpoints", step=step)

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


def _hyperparameters(trainer: Trainer, module: LoopModule) -> dict[str, Any]:
    """The module's `hparams` (when it has a mapping of them) and the Trainer's settings."""
    params: dict[str, Any] = {}
    hparams = getattr(module, "hparams", None)
    if isinstance(hparams, Mapping):
        params["module"] = dict(hparams)
    params["module/class"] = type(module).__qualname__
    params["trainer"] = {
        "max_epochs": trainer.max_epochs, "max_steps": trainer.max_steps,
        "accumulate_grad_batches": trainer.accumulate_grad_batches, "gradient_clip_val": trainer.gradient_clip_val,
        "precision": trainer.precision, "strategy": trainer.strategy, "seed": trainer.seed,
        "log_every_n_steps": trainer.log_every_n_steps,
    }
    return params
