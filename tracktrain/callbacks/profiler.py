"""`Profiler`: `torch.profiler` over a window of training batches; a trace for Perfetto / TensorBoard and a table of
the top ops, both kept as artifacts of the run."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch
from torch.profiler import ProfilerAction, ProfilerActivity

from tracktrain import storage
from tracktrain.callbacks.base import Callback, CallbackPhase
from tracktrain.callbacks.reporting import check_logger, is_rank_zero
from tracktrain.distributed.ranks import global_rank
from tracktrain.engine.events import Events

if TYPE_CHECKING:
    from tracktrain.distributed.logger import DistributedLogger
    from tracktrain.trainer.module import LoopModule
    from tracktrain.trainer.surface import TrainerSurface

__all__ = ["PROFILER_ARTIFACTS", "Profiler"]

PROFILER_ARTIFACTS = "profiler"  # the artifact path of the traces and tables in each tracker's run

# What `key_averages().table(sort_by=...)` can sort on (torch reads "cuda" as "device").
SORT_KEYS = (
    "self_cpu_time_total",
    "cpu_time_total",
    "cpu_time",
    "self_cpu_memory_usage",
    "cpu_memory_usage",
    "self_cuda_time_total",
    "cuda_time_total",
    "cuda_time",
    "self_cuda_memory_usage",
    "cuda_memory_usage",
    "self_device_time_total",
    "device_time_total",
    "device_time",
    "self_device_memory_usage",
    "device_memory_usage",
    "count",
    "flops",
)
_RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


class Profiler(Callback):
    """Profiles training batches with `torch.profiler` on a schedule: after `skip_first` batches, `repeat` windows of
    `wait` idle, `warmup` traced-but-dropped and `active` recorded batches. Activities: the CPU, and CUDA when the
    Trainer runs on it.

    At the end of each window every rank writes, under `dirpath`:

    - `rank{rank}.{batch}.pt.trace.json` (`.gz` with `use_gzip`): the Chrome trace of the window, `batch` being the
      training batch that ended it (counted from 1 over the run). Open it in https://ui.perfetto.dev or
      chrome://tracing, or point TensorBoard's profile plugin (torch-tb-profiler) at `dirpath`: the names follow
      `torch.profiler.tensorboard_trace_handler`'s `{worker}.{span}.pt.trace.json`, so the ranks are its workers and
      windows of the same batch line up across them;
    - `rank{rank}.{batch}.ops.txt`: `key_averages().table(sort_by, row_limit)`, the top ops of the window.

    Rank 0 logs its table on `logger` (default `get_dist_logger()`) and hands both files to every tracker of the
    Trainer (`Logger.log_artifact`, artifact path "profiler"); `trace_paths` and `table_paths` list what this
    process wrote. After the last window the profiler is stopped and its per-batch handler detached: later batches
    carry nothing of it. A fit that ends (or fails) inside a window stops the profiler there and writes what the
    window recorded so far.

    Args:
        wait, warmup, active, repeat, skip_first: `torch.profiler.schedule`'s, in training batches. `repeat` >= 1:
            every window costs time, so the number of windows is always given.
        dirpath: a local directory (default: `profiler` in the Trainer's `default_root_dir`, or in `.tracktrain`
            when that is a remote URL).
        record_shapes, profile_memory, with_stack: `torch.profiler.profile`'s (each adds overhead to the window).
        use_gzip: write `.pt.trace.json.gz` (traces are large; Perfetto and TensorBoard read them gzipped).
        sort_by: the column the table is sorted by, one of `SORT_KEYS`.
        row_limit: the ops shown in the table.
        logger: a `tracktrain.distributed.logger.DistributedLogger`.
    """

    # it frames the rest: what other callbacks do at an event is inside the window (the trackers' runs end after every
    # hook, so a window cut short by the fit's end or an exception still reaches them)
    phase = CallbackPhase.FIRST

    def __init__(
        self,
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        repeat: int = 1,
        skip_first: int = 0,
        dirpath: str | os.PathLike | None = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        use_gzip: bool = False,
        sort_by: str = "self_cpu_time_total",
        row_limit: int = 15,
        logger: DistributedLogger | None = None,
    ) -> None:
        self.wait = _check_int("wait", wait, minimum=0)
        self.warmup = _check_int("warmup", warmup, minimum=0)
        self.active = _check_int("active", active, minimum=1)
        self.repeat = _check_int("repeat", repeat, minimum=1)
        self.skip_first = _check_int("skip_first", skip_first, minimum=0)
        self.row_limit = _check_int("row_limit", row_limit, minimum=1)
        if sort_by not in SORT_KEYS:
            raise ValueError(f"Profiler(sort_by=...) must be one of {SORT_KEYS}, got {sort_by!r}.")
        self.sort_by = sort_by
        self.dirpath = _check_dirpath(dirpath)
        check_logger("Profiler", logger)
        self.logger = logger
        self.record_shapes = bool(record_shapes)
        self.profile_memory = bool(profile_memory)
        self.with_stack = bool(with_stack)
        self.use_gzip = bool(use_gzip)
        self.trace_paths: list[str] = []
        self.table_paths: list[str] = []
        self._profile: torch.profiler.profile | None = None
        self._directory: str | None = None  # where this fit's windows go (chosen when it starts)
        self._global_step = 0  # the fit's global step at the batch being profiled (the windows' titles)
        self._written: list[tuple[str, str, str, str]] = []  # (title, table, trace, table file) not yet published
        self._step_handler: Callable[[], None] | None = None
        self._window: list[int] = []  # the batches recorded in the current window
        self._windows = 0  # windows written in this fit
        self._batches = 0  # batches profiled (stepped) in this fit

    def event_handlers(self, trainer: TrainerSurface) -> Iterable[tuple[str, Any, Callable]]:
        """Start at the start of training; step after every training batch until the last window is written."""
        self._step_handler = lambda: self._step(trainer)
        return [
            ("fit", Events.STARTED, lambda: self._start(trainer)),
            ("fit", Events.ITERATION_COMPLETED, self._step_handler),
        ]

    def on_fit_end(self, trainer: TrainerSurface, module: LoopModule) -> None:
        self._stop(trainer, warn_if_empty=True)
        self._step_handler = None  # it holds the trainer: this callback may outlive it (to read `trace_paths`)

    def on_exception(self, trainer: TrainerSurface, module: LoopModule, exception: BaseException) -> None:
        self._stop(trainer, warn_if_empty=False)
        self._step_handler = None

    # ------------------------------------------------------------------------------------------------ the window
    def _start(self, trainer: TrainerSurface) -> None:
        self._stop(trainer, warn_if_empty=False)  # nothing, unless a previous fit of this callback never ended
        activities = [ProfilerActivity.CPU]
        if trainer.device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        self._directory = self.dirpath or os.path.join(storage.local_dir(trainer.default_root_dir), "profiler")
        self._window, self._windows, self._batches = [], 0, 0
        self._profile = torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(
                wait=self.wait, warmup=self.warmup, active=self.active, repeat=self.repeat, skip_first=self.skip_first
            ),
            on_trace_ready=self._trace_ready,
            record_shapes=self.record_shapes,
            profile_memory=self.profile_memory,
            with_stack=self.with_stack,
        )
        self._profile.start()

    def _step(self, trainer: TrainerSurface) -> None:
        profile = self._profile
        if profile is None:
            return
        self._batches += 1
        if profile.current_action in _RECORDING:
            self._window.append(trainer.train_engine.state.iteration)
        self._global_step = trainer.global_step
        profile.step()  # may end a window: `_trace_ready` runs inside
        self._publish(trainer)
        if self._windows == self.repeat:  # the last window is written: later batches carry nothing of the profiler
            handler, self._step_handler = self._step_handler, None
            if handler is not None and trainer.train_engine.has_event_handler(handler, Events.ITERATION_COMPLETED):
                trainer.train_engine.remove_event_handler(handler, Events.ITERATION_COMPLETED)
            self._stop(trainer, warn_if_empty=False)

    def _stop(self, trainer: TrainerSurface, warn_if_empty: bool) -> None:
        """Stop the profiler if it runs (a window under way is written with what it recorded)."""
        profile, self._profile = self._profile, None
        if profile is None:
            return
        try:
            profile.stop()
        finally:
            self._directory = None
        self._publish(trainer)
        if warn_if_empty and self._windows == 0:
            warnings.warn(
                f"Profiler recorded nothing: the fit ran {self._batches} training batches, and the first recorded "
                f"one is batch {self.skip_first + self.wait + self.warmup + 1} (skip_first + wait + warmup + 1). "
                "Lower them, or train longer.",
                RuntimeWarning,
                stacklevel=2,
            )

    def _trace_ready(self, profile: torch.profiler.profile) -> None:
        """torch.profiler's callback at a window's end (inside `profile.step()` or `stop()`): the window's files are
        written now, and published by the step or stop that called it (`_publish`)."""
        directory = self._directory
        window, self._window = self._window, []
        if directory is None or not window:
            return  # stopped right after a step began a window: no batch of it was recorded
        self._windows += 1
        os.makedirs(directory, exist_ok=True)
        rank = global_rank()
        base = os.path.join(directory, f"rank{rank}.{window[-1]}")
        trace = f"{base}.pt.trace.json{'.gz' if self.use_gzip else ''}"
        profile.export_chrome_trace(trace)
        title = f"Profiler: rank {rank}, training batches {window[0]}-{window[-1]} (global step {self._global_step})"
        table = profile.key_averages().table(sort_by=self.sort_by, row_limit=self.row_limit)
        with open(f"{base}.ops.txt", "w") as out:
            out.write(f"{title}, sorted by {self.sort_by}\n{table}\n")
        self.trace_paths.append(trace)
        self.table_paths.append(f"{base}.ops.txt")
        self._written.append((title, table, trace, f"{base}.ops.txt"))

    def _publish(self, trainer: TrainerSurface) -> None:
        """The windows written since the last call printed and sent to the trackers as artifacts (rank 0's alone:
        every rank keeps its files, rank 0 alone talks to trackers, their rule, and prints)."""
        written, self._written = self._written, []
        if not written or not is_rank_zero():
            return
        logger = self.logger
        if logger is None:
            from tracktrain.distributed.logger import get_dist_logger

            logger = get_dist_logger()
        for title, table, trace, table_file in written:
            logger.info(f"{title}; trace: {trace}\n{table}")
            trainer.log_artifact(trace, PROFILER_ARTIFACTS)
            trainer.log_artifact(table_file, PROFILER_ARTIFACTS)


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        bound = "a positive int" if minimum == 1 else "an int >= 0"
        raise ValueError(f"Profiler({name}=...) must be {bound} (training batches), got {value!r}.")
    return value


def _check_dirpath(dirpath: str | os.PathLike | None) -> str | None:
    if dirpath is None:
        return None
    if not isinstance(dirpath, (str, os.PathLike)):
        raise TypeError(f"Profiler(dirpath=...) takes a local directory (str or path), got {dirpath!r}.")
    if not storage.is_url(dirpath):
        return os.fspath(dirpath)
    local = storage.local_path(dirpath)  # a file:// URL as its path
    if local is None:
        raise ValueError(
            f"Profiler(dirpath=...) must be a local directory (torch.profiler writes local files), got {dirpath!r}. "
            "Leave it out, or give a local one: the traces reach remote storage as artifacts of the Trainer's loggers."
        )
    return local
