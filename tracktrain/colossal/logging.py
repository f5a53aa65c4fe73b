"""Colossal-AI's `colossalai.logging`: `get_dist_logger`, `DistributedLogger`, `disable_existing_loggers`.

The logger is tracktrain's rank-aware `DistributedLogger` (stderr and per-rank files) with Colossal-AI's calling
convention: `info(message, parallel_mode=ParallelMode.GLOBAL, ranks=None)` logs on every rank when `ranks` is None,
else on the ranks listed, counted within `parallel_mode`'s group.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from tracktrain.colossal.context.parallel_context import global_context
from tracktrain.colossal.context.parallel_mode import ParallelMode
from tracktrain.distributed import logger as _core
from tracktrain.distributed.ranks import global_rank

__all__ = ["DistributedLogger", "disable_existing_loggers", "get_dist_logger"]

_loggers: dict[str, DistributedLogger] = {}
_lock = threading.Lock()


class DistributedLogger(_core.DistributedLogger):
    """`get_dist_logger(name)`'s logger; `info`, `warning`, `error`, `debug` take Colossal-AI's arguments."""

    def _ranks_for(self, parallel_mode: ParallelMode, ranks: Iterable[int] | None) -> list[int]:
        """This process's global rank when it is to log (every rank, or those of `ranks` in `parallel_mode`)."""
        if ranks is not None and (isinstance(ranks, (str, bytes, int)) or not isinstance(ranks, Iterable)):
            raise TypeError(f"ranks must be None (every rank) or a list of ranks such as [0], got {ranks!r}.")
        if ranks is None:
            return [global_rank()]
        local = (
            global_context.get_local_rank(parallel_mode)
            if global_context.is_initialized(parallel_mode)
            else global_rank()
        )
        return [global_rank()] if local in list(ranks) else []

    def info(  # type: ignore[override]
        self, message: object, parallel_mode: ParallelMode = ParallelMode.GLOBAL, ranks: Iterable[int] | None = None
    ) -> None:
        """Log `message` at INFO on every rank, or on those of `ranks` (within `parallel_mode`)."""
        super().info(message, ranks=self._ranks_for(parallel_mode, ranks))

    def warning(  # type: ignore[override]
        self, message: object, parallel_mode: ParallelMode = ParallelMode.GLOBAL, ranks: Iterable[int] | None = None
    ) -> None:
        """Log `message` at WARNING on every rank, or on those of `ranks` (within `parallel_mode`)."""
        super().warning(message, ranks=self._ranks_for(parallel_mode, ranks))

    def error(  # type: ignore[override]
        self, message: object, parallel_mode: ParallelMode = ParallelMode.GLOBAL, ranks: Iterable[int] | None = None
    ) -> None:
        """Log `message` at ERROR on every rank, or on those of `ranks` (within `parallel_mode`)."""
        super().error(message, ranks=self._ranks_for(parallel_mode, ranks))

    def debug(  # type: ignore[override]
        self, message: object, parallel_mode: ParallelMode = ParallelMode.GLOBAL, ranks: Iterable[int] | None = None
    ) -> None:
        """Log `message` at DEBUG on every rank, or on those of `ranks` (within `parallel_mode`)."""
        super().debug(message, ranks=self._ranks_for(parallel_mode, ranks))


def get_dist_logger(name: str = "colossalai") -> DistributedLogger:
    """The `DistributedLogger` shared under `name` (one per name), created on first use."""
    with _lock:
        logger = _loggers.get(name)
        if logger is None:
            logger = _loggers[name] = DistributedLogger(name)
        return logger


def disable_existing_loggers(include: Iterable[str] | None = None, exclude: Iterable[str] = ("colossalai",)) -> None:
    """Set the stdlib loggers that exist now to WARNING: those named in `include`, or (without it) all but those in
    `exclude`, as Colossal-AI does."""
    included = None if include is None else _stdlib_names(include)
    excluded = _stdlib_names(exclude)
    for name in list(logging.Logger.manager.loggerDict):
        if (name in included) if included is not None else (name not in excluded):
            logging.getLogger(name).setLevel(logging.WARNING)


def _stdlib_names(names: Iterable[str]) -> set[str]:
    """`names` with the stdlib loggers under the `DistributedLogger`s of those names (which carry a longer name)."""
    given = set(names)
    with _lock:
        return given | {logger.logger.name for name, logger in _loggers.items() if name in given}
