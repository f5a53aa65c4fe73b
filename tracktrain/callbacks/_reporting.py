"""What the built-in callbacks share: handing values to the Trainer, the rank check, and one line of values."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from tracktrain.trainer.trainer import Trainer

__all__ = ["format_values", "is_fitting", "is_rank_zero", "report"]


def is_rank_zero() -> bool:
    """Whether this process prints and writes files: rank 0 under torch.distributed, always otherwise."""
    dist = torch.distributed
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def is_fitting(trainer: Trainer) -> bool:
    """Whether `trainer.fit()` is running, as opposed to a `validate()` or `test()` call of its own."""
    return bool(trainer._training)  # the Trainer has no public flag for this (yet)


def report(trainer: Trainer, values: Mapping[str, torch.Tensor | float]) -> None:
    """Put `values` into `trainer.callback_metrics` (as tensors, as the Trainer keeps them) and send them to the
    loggers through the Trainer's one publishing path, which reads them from the device once."""
    if not values:
        return
    trainer.callback_metrics.update(
        {name: value if isinstance(value, torch.Tensor) else torch.tensor(float(value)) for name, value in values.items()}
    )
    trainer._publish(values)


def format_value(value: float) -> str:
    """Four decimals for ordinary magnitudes; scientific notation for very small or very large ones."""
    if value == 0 or not math.isfinite(value) or 1e-3 <= abs(value) < 1e6:
        return f"{value:.4f}"
    return f"{value:.4e}"


def format_values(values: Mapping[str, Any]) -> str:
    """`name=value | name=value` with each value read as a float (a host sync per tensor: call it only to print)."""
    parts = []
    for name, value in values.items():
        number = float(value) if isinstance(value, (torch.Tensor, numbers.Real)) else None
        parts.append(f"{name}={format_value(number)}" if number is not None else f"{name}={value}")
    return " | ".join(parts)
