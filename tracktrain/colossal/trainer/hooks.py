"""Colossal-AI's trainer hooks, as the Trainer's callbacks under their Colossal-AI names and arguments.

Each hook *is* the built-in callback (a subclass that only maps the arguments), so there is one implementation
of each. The TensorBoard hook needs the tensorboard package and lives in the integrations:
`from tracktrain_integrations.tensorboard import TensorboardHook`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tracktrain.callbacks.base import Callback
from tracktrain.callbacks.memory import MemoryMonitor
from tracktrain.callbacks.metric_printer import MetricPrinter
from tracktrain.callbacks.metric_tracking import AccuracyTracker, LossTracker
from tracktrain.callbacks.model_checkpoint import ModelCheckpoint
from tracktrain.callbacks.reporting import report
from tracktrain.callbacks.timing import Timing
from tracktrain.distributed.logger import DistributedLogger
from tracktrain.engine.events import Events
from tracktrain.handlers.multi_timer import MultiTimer
from tracktrain.trainer.optimizers import LRSchedulerConfig

__all__ = [
    "AccuracyHook",
    "BaseHook",
    "LRSchedulerHook",
    "LogMemoryByEpochHook",
    "LogMetricByEpochHook",
    "LogTimingByEpochHook",
    "LossHook",
    "SaveCheckpointHook",
    "in_priority_order",
]


class BaseHook(Callback):
    """Colossal-AI's `BaseHook(priority)`: the Colossal `Trainer` hands its hooks to the Trainer in order of
    `priority` (lower first, stable, as Colossal-AI's trainer sorts them), kept here as `hook_priority`; each then
    runs at its `phase` of the run's order, in that order within the phase."""

    hook_priority: int = 0

    def __init__(self, priority: int = 0) -> None:
        self.hook_priority = priority


def in_priority_order(hooks: Iterable[Callback]) -> list[Callback]:
    """Colossal-AI's hook order: by `priority` (a hook's `hook_priority`; 0 for a plain callback), stable."""
    return sorted(hooks, key=lambda hook: getattr(hook, "hook_priority", 0))


class LossHook(LossTracker):
    """The epoch's mean training loss as `train_loss_avg` (a metric: it runs before the epoch's values are
    gathered, whatever its `priority` among the hooks)."""

    def __init__(self, priority: int = 0) -> None:
        super().__init__()
        self.hook_priority = priority


class AccuracyHook(AccuracyTracker):
    """Accuracy over each evaluation as `val_accuracy` (and `test_accuracy`); `priority` as in `LossHook`."""

    def __init__(self, priority: int = 0) -> None:
        super().__init__()
        self.hook_priority = priority


class LRSchedulerHook(BaseHook):
    """Step `lr_scheduler` after every training epoch (`by_epoch`) or every optimizer step; with
    `store_lr_in_state`, the first parameter group's learning rate is reported as `lr`. The scheduler's state
    rides in the Trainer's checkpoints."""

    def __init__(self, lr_scheduler: Any, by_epoch: bool, store_lr_in_state: bool = True, priority: int = 1) -> None:
        self.config = LRSchedulerConfig(lr_scheduler, interval="epoch" if by_epoch else "step")
        self.store_lr_in_state = store_lr_in_state
        self.hook_priority = priority
        self._stepped_at = 0

    def event_handlers(self, trainer: Any) -> Iterable[tuple[str, Any, Callable]]:
        event = Events.EPOCH_COMPLETED if self.config.interval == "epoch" else Events.ITERATION_COMPLETED
        return [("fit", event, lambda: self._step(trainer))]

    def _step(self, trainer: Any) -> None:
        if self.config.interval == "step":
            if trainer.global_step == self._stepped_at:
                return  # accumulating gradients: no optimizer step this batch
            self._stepped_at = trainer.global_step
        self.config.step(trainer.callback_metrics)
        if self.store_lr_in_state:
            report(trainer, {"lr": float(self.config.scheduler.optimizer.param_groups[0]["lr"])})

    def state_dict(self) -> dict[str, Any]:
        return {"scheduler": self.config.scheduler.state_dict(), "stepped_at": self._stepped_at}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.config.scheduler.load_state_dict(state_dict["scheduler"])
        self._stepped_at = state_dict["stepped_at"]


class LogMetricByEpochHook(MetricPrinter):
    """One line of the epoch's values every `interval` epochs, through `logger`."""

    def __init__(self, logger: DistributedLogger, interval: int = 1, priority: int = 10) -> None:
        super().__init__(logger, every_n_epochs=interval)
        self.hook_priority = priority  # among the printers: it runs after the epoch's values are published


class LogMemoryByEpochHook(MemoryMonitor):
    """Process memory (and CUDA peak memory) after each epoch, through `logger`."""

    def __init__(self, logger: DistributedLogger, interval: int = 1, priority: int = 10, log_eval: bool = True) -> None:
        _only_defaults("LogMemoryByEpochHook", interval=(interval, 1), log_eval=(log_eval, True))
        super().__init__(logger)
        self.hook_priority = priority


class LogTimingByEpochHook(Timing):
    """Epoch and step times and throughput after each epoch (and validation time), through `logger`, timed with
    `timer`."""

    def __init__(
        self,
        timer: MultiTimer,
        logger: DistributedLogger,
        interval: int = 1,
        priority: int = 10,
        log_eval: bool = True,
        ignore_num_train_steps: int = 0,
    ) -> None:
        _only_defaults(
            "LogTimingByEpochHook",
            interval=(interval, 1),
            log_eval=(log_eval, True),
            ignore_num_train_steps=(ignore_num_train_steps, 0),
        )
        super().__init__(logger, timer)
        self.hook_priority = priority


class SaveCheckpointHook(ModelCheckpoint):
    """Save a checkpoint every `interval` epochs into `checkpoint_dir`, keeping them all."""

    def __init__(
        self, interval: int = 1, checkpoint_dir: str | None = None, suffix: str = "", priority: int = 10
    ) -> None:
        super().__init__(dirpath=checkpoint_dir, filename_prefix=suffix, save_top_k=None, every_n_epochs=interval)
        self.hook_priority = priority


def _only_defaults(hook: str, **given_and_default: tuple[Any, Any]) -> None:
    """Refuse the Colossal-AI arguments these hooks do not implement, rather than ignore them."""
    for name, (given, default) in given_and_default.items():
        if given != default:
            raise ValueError(
                f"{hook}({name}={given!r}) is not supported: it reports after every epoch (and every evaluation). "
                f"Leave {name} at {default!r}, or use the callback it is built on with its own options."
            )
