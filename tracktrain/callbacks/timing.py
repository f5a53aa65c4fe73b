"""`Timing`: seconds per epoch, per step and per validation, and samples per second (Colossal-AI's
LogTimingByEpochHook and throughput hook).

The Trainer's face of the one stopwatch, `tracktrain.handlers.multi_timer.StopWatch` (held by a `MultiTimer`); Ignite's face of
the same watch is `tracktrain.handlers.Timer`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tracktrain.callbacks.base import Callback, CallbackPhase
from tracktrain.callbacks.reporting import check_logger, log_line, report
from tracktrain.handlers.multi_timer import MultiTimer
from tracktrain.trainer.batches import batch_size_of

if TYPE_CHECKING:
    from tracktrain.distributed.logger import DistributedLogger
    from tracktrain.trainer.module import LoopModule
    from tracktrain.trainer.surface import TrainerSurface

__all__ = ["Timing"]

EPOCH, STEP, VALIDATION = "train-epoch", "train-step", "validation"


class Timing(Callback):
    """Times training with a `MultiTimer` and reports, at the end of each training epoch:

    - `time/epoch`: seconds of the epoch's training, less the validations run within it (timed apart),
    - `time/step_mean`: mean seconds of the epoch's iterations (each one kept in the "train-step" history),
    - `throughput/samples_per_sec`: samples trained in the epoch / `time/epoch`, the samples of a batch being
      the length of its first tensor (read from its shape: no device sync);

    and `time/validation` at the end of each validation. Values go into `trainer.callback_metrics`, the Trainer's
    loggers and one line on `logger` (default `get_dist_logger()`; rank 0 only).

    Args:
        logger: a `tracktrain.distributed.logger.DistributedLogger`.
        timer: the `MultiTimer` to use (default: a new one). Its watches "train-epoch", "train-step" and
            "validation" can be read after the run. Without `synchronize=True` on CUDA, times are those of
            launching the work, not of running it.
    """

    phase = CallbackPhase.METRICS  # the epoch timed before its validation runs

    def __init__(self, logger: DistributedLogger | None = None, timer: MultiTimer | None = None) -> None:
        if timer is not None and not isinstance(timer, MultiTimer):
            raise TypeError(f"Timing(timer=...) takes a tracktrain.handlers.multi_timer.MultiTimer, got {timer!r}.")
        check_logger("Timing", logger)
        self.logger = logger
        self.timer = timer if timer is not None else MultiTimer()
        self._samples = 0
        self._validation_seconds = 0.0  # validations run inside the current training epoch (val_check_interval)
        self._step_count_at_start = 0
        self._step_sum_at_start = 0.0

    # --------------------------------------------------------------------------------------------- training
    def on_train_epoch_start(self, trainer: TrainerSurface, module: LoopModule) -> None:
        self._restart(EPOCH)
        self._samples = 0
        self._validation_seconds = 0.0
        if STEP in self.timer:
            watch = self.timer.get_timer(STEP)
            self._step_count_at_start, self._step_sum_at_start = watch.history_count, watch.get_history_sum()

    def on_train_batch_start(self, trainer: TrainerSurface, module: LoopModule, batch: Any, batch_idx: int) -> None:
        self._restart(STEP)
        self._samples += batch_size_of(batch)

    def on_train_batch_end(
        self, trainer: TrainerSurface, module: LoopModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.timer.stop(STEP, keep_in_history=True)

    def on_train_epoch_end(self, trainer: TrainerSurface, module: LoopModule) -> None:
        if not self.timer.is_on():
            return
        seconds = self.timer.stop(EPOCH, keep_in_history=True) - self._validation_seconds
        values = {"time/epoch": seconds}
        if STEP in self.timer:
            step = self.timer.get_timer(STEP)
            steps = step.history_count - self._step_count_at_start
            if steps:
                values["time/step_mean"] = (step.get_history_sum() - self._step_sum_at_start) / steps
        if seconds > 0:
            values["throughput/samples_per_sec"] = self._samples / seconds
        self._report(trainer, f"Epoch {trainer.current_epoch + 1}", values)

    # ------------------------------------------------------------------------------------------- validation
    def on_validation_start(self, trainer: TrainerSurface, module: LoopModule) -> None:
        self._restart(VALIDATION)

    def on_validation_end(self, trainer: TrainerSurface, module: LoopModule) -> None:
        if not self.timer.is_on() or trainer.sanity_checking:  # the sanity check's batches are not a validation
            return
        seconds = self.timer.stop(VALIDATION, keep_in_history=True)
        if EPOCH in self.timer and self.timer.get_timer(EPOCH).is_running:
            self._validation_seconds += seconds  # a validation within the epoch (val_check_interval)
        self._report(trainer, "Validation", {"time/validation": seconds})

    # ------------------------------------------------------------------------------------------------ helpers
    def _restart(self, name: str) -> None:
        """Start `name`, first dropping an interval left running by a run that ended early (an exception, or
        `max_steps` reached mid-epoch, where the epoch never completes)."""
        if name in self.timer and self.timer.get_timer(name).is_running:
            self.timer.stop(name)
        self.timer.start(name)

    def _report(self, trainer: TrainerSurface, title: str, values: Mapping[str, float]) -> None:
        report(trainer, values)
        log_line(self.logger, title, values)
