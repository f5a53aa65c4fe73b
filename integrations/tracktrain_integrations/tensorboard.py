"""TensorBoard for the Trainer: `TensorBoardLogger` (every published value as a scalar) and the Colossal-AI-named
`TensorboardHook` that installs one.

Needs the `tensorboard` package: `pip install 'tracktrain[tensorboard]'`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from tracktrain.callbacks.base import Callback
from tracktrain.ranks import global_rank

__all__ = ["TensorBoardLogger", "TensorboardHook"]


def _summary_writer() -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as error:  # torch's module imports the tensorboard package
        raise ImportError(
            "TensorBoard logging needs the tensorboard package: pip install 'tracktrain[tensorboard]'"
        ) from error
    return SummaryWriter


class TensorBoardLogger:
    """Writes each value the Trainer publishes as a TensorBoard scalar at its global step."""

    def __init__(self, log_dir: str | os.PathLike) -> None:
        self.log_dir = os.fspath(log_dir)
        self._writer = _summary_writer()(log_dir=self.log_dir)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        for name, value in metrics.items():
            self._writer.add_scalar(name, value, global_step=step)

    def finalize(self, status: str = "success") -> None:
        self._writer.flush()
        self._writer.close()


class TensorboardHook(Callback):
    """Colossal-AI's TensorboardHook: log the run's values to TensorBoard under `log_dir`, on the given `ranks`
    (each rank writes to `log_dir/rank_{rank}`)."""

    priority = 10

    def __init__(self, log_dir: str | os.PathLike, ranks: Sequence[int] = (0,)) -> None:
        if isinstance(ranks, int) or not all(isinstance(rank, int) for rank in ranks):
            raise TypeError(f"TensorboardHook(ranks=...) must be a list of ranks, e.g. [0], got {ranks!r}.")
        _summary_writer()  # fail now, not at the first epoch, when tensorboard is missing
        self.log_dir = os.fspath(log_dir)
        self.ranks = list(ranks)
        self.logger: TensorBoardLogger | None = None

    def on_fit_start(self, trainer: Any, module: Any) -> None:
        rank = global_rank()
        if rank in self.ranks and self.logger is None:
            self.logger = TensorBoardLogger(os.path.join(self.log_dir, f"rank_{rank}"))
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

