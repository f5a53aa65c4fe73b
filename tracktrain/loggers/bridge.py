"""`LoggerBridge`: the one link between a Trainer and its loggers, over their `TrackerRuns`.

The Trainer starts (or resumes) the runs first thing when a fit starts, with its settings as hyperparameters, asks
for delivery last thing at each epoch's end, and ends the runs last thing when the fit ends — FINISHED, FAILED on an
exception, KILLED on pre-emption or Ctrl-C (see `runs.status_of`): its own work in the run's order
(`tracktrain.trainer.run_order`), so whatever a callback hands the trackers, at any phase and in any order, reaches
open runs. In between the bridge forwards what the Trainer publishes (`log_metrics`), makes the queued records durable
before a checkpoint commits (`persist`) and announces saved checkpoints (`checkpoint_saved`). The run ids are saved in
checkpoints with the callbacks' states, so a resumed fit continues the same runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tracktrain.distributed.preemption import Terminated
from tracktrain.loggers.base import Logger
from tracktrain.loggers.runs import TrackerRuns
from tracktrain.trainer.callback import Callback

if TYPE_CHECKING:
    from tracktrain.trainer.module import LoopModule
    from tracktrain.trainer.surface import TrainerSurface

__all__ = ["LoggerBridge", "Terminated"]


class LoggerBridge(Callback):
    """Drives a Trainer's `loggers` through one `TrackerRuns` (see the module's description). The Trainer makes it
    (`Trainer(loggers=[...])`) and calls it; it is among the callbacks for its state only (the runs' ids, saved in
    checkpoints under "LoggerBridge"), with no hooks of its own."""

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

    # ---------------------------------------------------------------- the runs' lifecycle (the Trainer's own work)
    def start_runs(self, trainer: TrainerSurface, module: LoopModule) -> None:
        """A fit starts: start the runs, or resume those of the checkpoint resumed."""
        changes = trainer.resume_changes
        hidden = {  # save_hyperparameters(logger=False): checkpointed, not sent to the trackers
            part
            for part, owner in (("module", module), ("datamodule", trainer.datamodule))
            if not getattr(owner, "hparams_to_loggers", True)
        }
        self.runs.start(
            trainer.default_root_dir,
            params={key: value for key, value in trainer.settings.items() if key not in hidden},
            module=module,
            changed_tags=_change_tags(changes, trainer.global_step) if changes else None,
        )

    def start_entry_runs(self, trainer: TrainerSurface) -> None:
        """`validate()`, `test()` or `predict()` on its own starts: the runs of this Trainer's last fit continue (its
        test metrics land beside the fit's, as in Lightning), or, with none, new runs start."""
        self.runs.resume_ids = {**self.runs.resume_ids, **self.runs.run_ids}
        self.runs.start(trainer.default_root_dir, params=trainer.settings or None)

    def finish_entry_runs(self) -> None:
        """`validate()` or `test()` on its own ended: its runs are FINISHED (no model is kept: it trained none)."""
        self.runs.finish()

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.runs.log_metrics(metrics, step)

    def persist(self) -> None:
        self.runs.persist()

    def checkpoint_saved(self, path: str, step: int | None = None) -> None:
        self.runs.checkpoint_saved(path, step)

    def log_artifact(self, path: str, artifact_path: str | None, step: int | None = None) -> None:
        self.runs.log_artifact(path, artifact_path, step)

    def flush_runs(self) -> None:
        """An epoch ended: ask for delivery of what is queued."""
        self.runs.flush()

    def finish_runs(self, module: LoopModule) -> None:
        """The fit ended: the runs are FINISHED (trackers that keep the trained model get `module` first)."""
        self.runs.finish(module=module)

    def fail_runs(self, exception: BaseException) -> None:
        """The fit stopped on `exception`: the runs are FAILED, or KILLED on pre-emption or Ctrl-C."""
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
