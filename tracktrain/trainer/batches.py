"""Batches and loaders as the Trainer counts them: batch size, epoch length. (Device moves: `tracktrain.engine.batches`.)"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch

from tracktrain.engine.combined_loader import CombinedLoader, loaders_in

__all__ = [
    "SequentialLoaders",
    "batch_size_of",
    "combined_for_training",
    "epoch_length_of",
    "loader_length",
    "several_loaders",
]


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


def several_loaders(loader: Any) -> list[Any] | None:
    """Lightning's several loaders of one evaluation stage, in order: a dict, list or tuple of DataLoaders (nested
    too: `{"a": [dl1, dl2]}`), or a `CombinedLoader(mode="sequential")`'s; None for one loader (a CombinedLoader of
    another mode is one: a batch of each per step). (Only DataLoaders count: a list of batches is one loader.)"""
    if isinstance(loader, CombinedLoader):
        return loader.flattened if loader.mode == "sequential" else None
    return loaders_in(loader)


def combined_for_training(loader: Any) -> Any:
    """The training loader as a fit reads it, Lightning's rule: several loaders (a list, tuple or dict of DataLoaders)
    are one `CombinedLoader(mode="max_size_cycle")`; a CombinedLoader is read as one; another loader as it is."""
    if not isinstance(loader, CombinedLoader) and several_loaders(loader) is not None:
        return CombinedLoader(loader, "max_size_cycle")
    return loader


class SequentialLoaders:
    """Several loaders read one after the other as one pass (Lightning's sequential mode): `loaders[0]`'s first
    `lengths[0]` batches (None: all of it), then `loaders[1]`'s, and so on. While a batch is out, `dataloader_idx` is
    its loader's index and `batch_idx` its index within that loader."""

    def __init__(self, loaders: list[Iterable[Any]], lengths: list[int | None]) -> None:
        self.loaders, self.lengths = loaders, lengths
        self.dataloader_idx = 0
        self.batch_idx = 0

    def __len__(self) -> int:
        """The batches of the pass; a TypeError (no length) when one loader's is unknown."""
        if any(length is None for length in self.lengths):
            raise TypeError("one of the loaders has no length")
        return sum(length for length in self.lengths if length is not None)

    def __iter__(self) -> Iterator[Any]:
        for dataloader_idx, (loader, length) in enumerate(zip(self.loaders, self.lengths)):
            if length == 0:
                continue
            for batch_idx, batch in enumerate(loader):
                self.dataloader_idx, self.batch_idx = dataloader_idx, batch_idx
                yield batch
                if length is not None and batch_idx + 1 >= length:
                    break  # the limit reached: no batch more is read from this loader
