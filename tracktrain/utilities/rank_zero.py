"""Lightning's `utilities.rank_zero`: run a function, or log, on the process of global rank 0 only (the rank read from
torchrun's environment or the process group, `tracktrain.distributed.ranks`)."""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from tracktrain.distributed.ranks import global_rank

__all__ = ["rank_zero_debug", "rank_zero_deprecation", "rank_zero_info", "rank_zero_only", "rank_zero_warn"]

T = TypeVar("T")
_logger = logging.getLogger("tracktrain")


class _RankZeroOnly:
    """`@rank_zero_only` runs the function on rank 0 and returns `default` elsewhere; `rank_zero_only.rank` is this
    process's rank (Lightning sets it; here it is read from the environment unless a program sets it)."""

    def __init__(self) -> None:
        self._rank: int | None = None

    @property
    def rank(self) -> int:
        return global_rank() if self._rank is None else self._rank

    @rank.setter
    def rank(self, value: int) -> None:
        self._rank = int(value)

    def __call__(self, fn: Callable[..., T], default: Any = None) -> Callable[..., Any]:
        @functools.wraps(fn)
        def on_rank_zero(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs) if self.rank == 0 else default

        return on_rank_zero


rank_zero_only = _RankZeroOnly()


def rank_zero_info(*args: Any, stacklevel: int = 4, **kwargs: Any) -> None:
    if rank_zero_only.rank == 0:
        _logger.info(*args, stacklevel=stacklevel, **kwargs)


def rank_zero_debug(*args: Any, stacklevel: int = 4, **kwargs: Any) -> None:
    if rank_zero_only.rank == 0:
        _logger.debug(*args, stacklevel=stacklevel, **kwargs)


def rank_zero_warn(message: str | Warning, stacklevel: int = 4, **kwargs: Any) -> None:
    if rank_zero_only.rank == 0:
        warnings.warn(message, stacklevel=stacklevel, **kwargs)


def rank_zero_deprecation(message: str | Warning, stacklevel: int = 5, **kwargs: Any) -> None:
    kwargs.setdefault("category", DeprecationWarning)
    rank_zero_warn(message, stacklevel=stacklevel, **kwargs)
