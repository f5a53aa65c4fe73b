"""TensorBoard for the Trainer: `TensorBoardLogger` (every published value as a scalar) and the Colossal-AI-named
`TensorboardHook` that installs one.

Needs the `tensorboard` package: `pip install 'tracktrain[tensorboard]'`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from tracktrain import storage
from tracktrain.callbacks.base import Callback
from tracktrain.distributed.ranks import global_rank, rank_and_world_size
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
    writer thread, so it needs no delivery queue."""

    name = "tensorboard"

    def __init__(self, log_dir: str | os.PathLike | None = None) -> None:
        _summary_writer()  # fail now, not when fit starts, when tensorboard is missing
        self.log_dir = os.fspath(log_dir) if log_dir is not None else None
        self._writer: Any = None

    @property
    def run_id(self) -> str | None:
        return self.log_dir

    def start(self, root_dir: str) -> None:
        if self._writer is None:
            self.log_dir = self.log_dir or os.path.join(storage.local_dir(root_dir), "tensorboard")
            self._writer = _summary_writer()(log_dir=self.log_dir)

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

    def __init__(
        self,
        log_dir: str | os.PathLike,
        ranks: Sequence[int] | None = None,
        parallel_mode: Any = None,
        priority: int = 10,
    ) -> None:
        """Colossal-AI's arguments: `ranks` None (every rank) or a list; `parallel_mode` the group `ranks` count
        in (Colossal-AI's `ParallelMode.GLOBAL` by default); `priority` the order among the Colossal Trainer's hooks."""
        if ranks is None:
            ranks = list(range(rank_and_world_size()[1]))
        if isinstance(ranks, int) or not all(isinstance(rank, int) for rank in ranks):
            raise TypeError(f"TensorboardHook(ranks=...) must be a list of ranks, e.g. [0], got {ranks!r}.")
        if list(ranks) != [0]:
            raise ValueError(
                f"TensorboardHook(ranks={list(ranks)}): values reach loggers on rank 0 only (one run per training "
                "job), so only ranks=[0] writes anything. Use ranks=[0]."
            )
        if parallel_mode is not None and getattr(parallel_mode, "value", None) != "global":
            raise ValueError(
                f"TensorboardHook(parallel_mode={parallel_mode}): ranks count among all processes here "
                "(ParallelMode.GLOBAL); leave parallel_mode out."
            )
        self.hook_priority = priority  # the order the Colossal Trainer hands its hooks over
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
