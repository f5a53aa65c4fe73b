"""`MemoryMonitor`: the process's resident memory and CUDA's peak allocation (Colossal-AI's LogMemoryByEpochHook)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from tracktrain.callbacks.base import Callback
from tracktrain.callbacks.reporting import check_logger, log_line, report
from tracktrain.engine.events import Events

if TYPE_CHECKING:
    from tracktrain.distributed.logger import DistributedLogger
    from tracktrain.trainer.surface import TrainerSurface

__all__ = ["MemoryMonitor", "cuda_max_allocated_mb", "rss_mb"]

_MB = 1024 * 1024


def rss_mb() -> float:
    """This process's resident set size in MiB: the current one from /proc/self/statm on Linux; elsewhere the
    peak, from getrusage (the only measure the standard library has there)."""
    try:
        with open("/proc/self/statm") as statm:
            resident_pages = int(statm.read().split()[1])
        return resident_pages * os.sysconf("SC_PAGE_SIZE") / _MB
    except (OSError, ValueError, IndexError):
        import resource  # Unix only: imported where it is needed

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / _MB if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB elsewhere


def cuda_max_allocated_mb() -> float | None:
    """The peak of CUDA memory allocated by tensors on the current device in MiB; None until CUDA is initialized
    (asking would initialize it)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    return torch.cuda.max_memory_allocated() / _MB


class MemoryMonitor(Callback):
    """Reports `memory/rss_mb` and, once CUDA is initialized, `memory/cuda_max_allocated_mb` into
    `trainer.callback_metrics`, the Trainer's loggers and a line on `logger` (default `get_dist_logger()`).

    Each process measures its own memory and publishes it; the line is printed by rank 0 only.

    Args:
        logger: a `tracktrain.distributed.logger.DistributedLogger`.
        logging_interval: "epoch": at the end of each training epoch; "step": every `log_every_n_steps`
            optimizer steps (the Trainer's interval for per-step values).
    """

    def __init__(self, logger: DistributedLogger | None = None, logging_interval: str = "epoch") -> None:
        if logging_interval not in ("epoch", "step"):
            raise ValueError(
                f'MemoryMonitor(logging_interval=...) must be "epoch" or "step", got {logging_interval!r}.'
            )
        check_logger("MemoryMonitor", logger)
        self.logger = logger
        self.logging_interval = logging_interval
        self._logged_intervals = 0

    def event_handlers(self, trainer: TrainerSurface) -> Iterable[tuple[str, Any, Callable]]:
        """The one handler the interval needs."""
        if self.logging_interval == "epoch":
            return [
                ("fit", Events.EPOCH_COMPLETED, lambda: self._measure(trainer, f"Epoch {trainer.current_epoch + 1}"))
            ]
        return [
            ("fit", Events.STARTED, lambda: self._start_counting(trainer)),
            ("fit", Events.ITERATION_COMPLETED, lambda: self._on_batch_end(trainer)),
        ]

    def _start_counting(self, trainer: TrainerSurface) -> None:
        # after a checkpoint was loaded: a resumed run goes on counting from its global step
        self._logged_intervals = trainer.global_step // trainer.log_every_n_steps

    def _on_batch_end(self, trainer: TrainerSurface) -> None:
        # once per log_every_n_steps optimizer steps, counted in whole intervals: once per step under gradient
        # accumulation, and at the same pace when one batch takes several steps (manual optimization)
        intervals = trainer.global_step // trainer.log_every_n_steps
        if intervals > self._logged_intervals:
            self._logged_intervals = intervals
            self._measure(trainer, f"Step {trainer.global_step}")

    def _measure(self, trainer: TrainerSurface, title: str) -> None:
        values = {"memory/rss_mb": rss_mb()}
        cuda = cuda_max_allocated_mb()
        if cuda is not None:
            values["memory/cuda_max_allocated_mb"] = cuda
        report(trainer, values)
        log_line(self.logger, title, values)
