"""`MetricPrinter`: one log line per epoch with the values logged in it (Colossal-AI's LogMetricByEpochHook)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracktrain.callbacks.base import Callback, CallbackPhase
from tracktrain.callbacks.reporting import check_logger, is_fitting, log_line
from tracktrain.checks.numeric import is_integral

if TYPE_CHECKING:
    from tracktrain.distributed.logger import DistributedLogger
    from tracktrain.trainer.module import LoopModule
    from tracktrain.trainer.surface import TrainerSurface

__all__ = ["MetricPrinter"]


class MetricPrinter(Callback):
    """Logs `Epoch 3/10 | train_loss=0.1234 | val_loss=0.2345` at the end of every `every_n_epochs`-th training
    epoch (after its validation), and `Validation | ...` / `Test | ...` at the end of `trainer.validate()` and
    `trainer.test()`.

    A line holds the entries of `trainer.callback_metrics` that were written during the epoch (or the
    validation or test run), in the order they were first logged, so a value of an earlier epoch is never shown
    as this one's. Lines go to `logger` (default: `get_dist_logger()`), from rank 0 only.

    Args:
        logger: a `tracktrain.distributed.logger.DistributedLogger` (its `log_to_file` adds a file).
        every_n_epochs: print every n-th training epoch.
    """

    phase = CallbackPhase.LAST  # after everything else at an epoch's end, the Trainer's own publishing included

    def __init__(self, logger: DistributedLogger | None = None, every_n_epochs: int = 1) -> None:
        if not is_integral(every_n_epochs) or isinstance(every_n_epochs, bool) or every_n_epochs < 1:
            raise ValueError(f"MetricPrinter(every_n_epochs=...) must be a positive integer, got {every_n_epochs!r}.")
        check_logger("MetricPrinter", logger)
        self.logger = logger
        self.every_n_epochs = int(every_n_epochs)
        self._before: dict[str, Any] = {}

    # a period's values are the entries replaced since its start: every write stores a new object
    def _start_period(self, trainer: TrainerSurface) -> None:
        self._before = dict(trainer.callback_metrics)

    def _written_since_start(self, trainer: TrainerSurface) -> dict[str, Any]:
        before = self._before
        self._before = {}
        return {name: value for name, value in trainer.callback_metrics.items() if before.get(name) is not value}

    # --------------------------------------------------------------------------------------------- hooks
    def on_train_epoch_start(self, trainer: TrainerSurface, module: LoopModule) -> None:
        self._start_period(trainer)

    def on_train_epoch_end(self, trainer: TrainerSurface, module: LoopModule) -> None:
        values = self._written_since_start(trainer)
        epoch = trainer.current_epoch + 1
        if epoch % self.every_n_epochs:
            return
        total = f"/{trainer.max_epochs}" if trainer.max_epochs is not None else ""
        log_line(self.logger, f"Epoch {epoch}{total}", values)

    def on_validation_start(self, trainer: TrainerSurface, module: LoopModule) -> None:
        if not is_fitting(trainer):  # during fit, validation values go into the epoch's line
            self._start_period(trainer)

    def on_validation_end(self, trainer: TrainerSurface, module: LoopModule) -> None:
        if not is_fitting(trainer):
            log_line(self.logger, "Validation", self._written_since_start(trainer))

    def on_test_start(self, trainer: TrainerSurface, module: LoopModule) -> None:
        self._start_period(trainer)

    def on_test_end(self, trainer: TrainerSurface, module: LoopModule) -> None:
        log_line(self.logger, "Test", self._written_since_start(trainer))
