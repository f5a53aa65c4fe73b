"""Batches and loaders as the Trainer counts them: batch size, epoch length. (Device moves: `tracktrain.engine.batches`.)"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

__all__ = ["batch_size_of", "epoch_length_of", "loader_length"]


def batch_size_of(batch: Any) -> int:
    """The length of the first tensor found in `batch` (depth first), from its shape; 1 when there is none."""
    kind = type(batch)
    if (kind is tuple or kind is list) and batch and type(batch[0]) is torch.Tensor:  # (inputs, targets): no walk
        batch = batch[0]
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else 1
    if isinstance(batch, Mapping):
        parts: Iterable[Any] = batch.values()
    elif isinstance(batch, (list, tuple)):
        parts = batch
    else:
        return 1
    for part in parts:
        if isinstance(part, (torch.Tensor, Mapping, list, tuple)):
            return batch_size_of(part)
    return 1


def loader_length(loader: Iterable[Any]) -> int | None:
    """`len(loader)`, or None for loaders without one (a DataLoader over an IterableDataset raises TypeError)."""
    try:
        return len(loader)  # type: ignore[arg-type]
    except TypeError:
        return None


def epoch_length_of(name: str, loader: Iterable[Any], limit: int | float | None) -> int | None:
    """How many batches of `loader` an epoch takes under the Trainer's `name` limit (None: the loader's length,
    unknown for loaders without one)."""
    length = loader_length(loader)
    if limit is None:
        return length
    if isinstance(limit, float):
        if length is None:
            raise ValueError(
                f"Trainer({name}={limit}) is a fraction, but the loader has no len(); give a number of batches."
            )
        return int(length * limit)
    return limit if length is None else min(length, limit)
