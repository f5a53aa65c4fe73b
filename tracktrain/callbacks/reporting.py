"""What the built-in callbacks share: handing values to the Trainer, the rank check, and one line of values."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from tracktrain.distributed.ranks import global_rank
from tracktrain.trainer.metric_log import to_floats

if TYPE_CHECKING:
    from tracktrain.distributed.logger import DistributedLogger
    from tracktrain.trainer.surface import TrainerSurface

__all__ = ["check_logger", "format_values", "is_fitting", "is_rank_zero", "log_line", "report"]


def is_rank_zero() -> bool:
    """Whether this process prints and writes files: rank 0 of a distributed run, or the only process."""
    return global_rank() == 0


def is_fitting(trainer: TrainerSurface) -> bool:
    """Whether `trainer.fit()` is running (its sanity check included), as opposed to a `validate()` or `test()` call
    of its own."""
    return trainer.fitting or trainer.sanity_checking


def report(trainer: TrainerSurface, values: Mapping[str, torch.Tensor | float]) -> None:
    """Put `values` into `trainer.callback_metrics` (as tensors, as the Trainer keeps them) and send them to the
    loggers through the Trainer's one publishing path, which reads them from the device once."""
    if not values:
        return
    # float64, so that reading a number back gives exactly the number reported
    trainer.callback_metrics.update(
        {
            name: value if isinstance(value, torch.Tensor) else torch.tensor(float(value), dtype=torch.float64)
            for name, value in values.items()
        }
    )
    trainer.publish(values)


def format_value(value: float) -> str:
    """Four decimals for ordinary magnitudes; scientific notation for very small or very large ones."""
    if value == 0 or not math.isfinite(value) or 1e-3 <= abs(value) < 1e6:
        return f"{value:.4f}"
    return f"{value:.4e}"


def format_values(values: Mapping[str, Any]) -> str:
    """`name=value | name=value`, the tensors read from their devices in one transfer each (the sync of printing)."""
    floats = to_floats({name: value for name, value in values.items() if _is_scalar(value)})
    return " | ".join(
        f"{name}={format_value(floats[name]) if name in floats else value}" for name, value in values.items()
    )


def _is_scalar(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.numel() == 1
    return isinstance(value, numbers.Real)


def check_logger(owner: str, logger: Any) -> None:
    """Refuse a `logger=` that cannot take lines, naming the callback."""
    if logger is not None and not callable(getattr(logger, "info", None)):
        raise TypeError(
            f"{owner}(logger=...) takes a DistributedLogger (tracktrain.distributed.logger.get_dist_logger()), got {logger!r}."
        )


def log_line(logger: DistributedLogger | None, title: str, values: Mapping[str, Any]) -> None:
    """Log `title | name=value | ...` on `logger` (default `get_dist_logger()`), from rank 0 only; the values are
    read from the device only there."""
    if not is_rank_zero():
        return
    if logger is None:
        from tracktrain.distributed.logger import get_dist_logger

        logger = get_dist_logger()
    logger.info(f"{title} | {format_values(values) if values else 'no values logged'}")
