"""TensorBoard for the Trainer: `TensorBoardLogger` (every published value as a scalar) and the Colossal-AI-named
`TensorboardHook` that installs one.

Needs the `tensorboard` package: `pip install 'tracktrain[tensorboard]'`.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping, Sequence
from typing import Any

from tracktrain import storage
from tracktrain.callbacks.base import Callback
from tracktrain.distributed.ranks import global_rank
from tracktrain.loggers.base import Logger, flatten_params

__all__ = ["TensorBoardLogger", "TensorboardHook"]


def _summary_writer() -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as error:  # torch's module imports the tensorboard package
        raise ImportError(
            "TensorBoard logging needs the tensorboard package: pip install 'tracktrain[tensorboard]'"
        ) from error
    return SummaryWriter


class TensorBoardLogger(Logger):
    """Writes each value the Trainer publishes as a TensorBoard scalar at its global step, under `log_dir`
    (default `{default_root_dir}/tensorboard`, or `./.tracktrain/tensorboard` when the root dir is a remote URL;
    an explicit `log_dir` may be any location TensorBoard writes to). Writing event files is local and buffered by TensorBoard's own
    writer thread, so it needs no delivery queue. `writer_kwargs` go to torch's `SummaryWriter` (`flush_secs`,
    `max_queue`, `purge_step`, `filename_suffix`, ...)."""

    name = "tensorboard"

    def __init__(self, log_dir: str | os.PathLike | None = None, **writer_kwargs: Any) -> None:
        writer_class = _summary_writer()  # fail now, not when fit starts, when tensorboard is missing
        unknown = sorted(set(writer_kwargs) - set(inspect.signature(writer_class).parameters))
        if unknown:
            raise TypeError(
                f"TensorBoardLogger got arguments SummaryWriter does not take: {unknown}; see "
                "help(torch.utils.tensorboard.SummaryWriter) for the ones it does."
            )
        self.log_dir = os.fspath(log_dir) if log_dir is not None else None
        self.writer_kwargs = writer_kwargs
        self._writer: Any = None

    @property
    def writer(self) -> Any:
        """The `SummaryWriter` (after `start`), for what this logger does not write itself (images, graphs...)."""
        if self._writer is None:
            raise RuntimeError("TensorBoardLogger has no writer before start(): the Trainer starts it when fit begins.")
        return self._writer

    @property
    def run_id(self) -> str | None:
        return self.log_dir

    def start(self, root_dir: str) -> None:
        if self._writer is None:
            self.log_dir = self.log_dir or os.path.join(storage.local_dir(root_dir), "tensorboard")
            self._writer = _summary_writer()(log_dir=self.log_dir, **self.writer_kwargs)

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        text = "\n".join(f"{name}: {value}" for name, value in flatten_params(params).items())
        self._writer.add_text("hyperparameters", text)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        for name, value in metrics.items():
            self._writer.add_scalar(name, value, global_step=step)

    def flush(self, timeout: float | None = None) -> bool:
        if self._writer is not None:
            self._writer.flush()
        return True

    def finalize(self, status: str = "FINISHED") -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class TensorboardHook(Callback):
    """Colossal-AI's TensorboardHook: log the run's values to TensorBoard under `log_dir`, on the given `ranks`
    (each rank writes to `log_dir/rank_{rank}`)."""

    hook_priority = 10  # Colossal-AI's default for this hook: the Colossal Trainer orders its hooks by it

    def __init__(self, log_dir: str | os.PathLike, ranks: Sequence[int] = (0,)) -> None:
        if isinstance(ranks, int) or not all(isinstance(rank, int) for rank in ranks):
            raise TypeError(f"TensorboardHook(ranks=...) must be a list of ranks, e.g. [0], got {ranks!r}.")
        if list(ranks) != [0]:
            raise ValueError(
                f"TensorboardHook(ranks={list(ranks)}): values reach loggers on rank 0 only (one run per training "
                "job), so only ranks=[0] writes anything. Use ranks=[0]."
            )
        _summary_writer()  # fail now, not at the first epoch, when tensorboard is missing
        self.log_dir = os.fspath(log_dir)
        self.ranks = list(ranks)
        self.logger: TensorBoardLogger | None = None

    def on_fit_start(self, trainer: Any, module: Any) -> None:
        rank = global_rank()
        if rank in self.ranks and self.logger is None:
            self.logger = TensorBoardLogger(os.path.join(self.log_dir, f"rank_{rank}"))
            self.logger.start(trainer.default_root_dir)
            trainer.loggers.append(self.logger)

    def on_fit_end(self, trainer: Any, module: Any) -> None:
        self._close(trainer)

    def on_exception(self, trainer: Any, module: Any, exception: BaseException) -> None:
        self._close(trainer)

    def _close(self, trainer: Any) -> None:
        if self.logger is not None:
            self.logger.finalize()
            trainer.loggers.remove(self.logger)
            self.logger = None
