"""`get_dataloader`: a DataLoader that shards the dataset across processes when running distributed."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

__all__ = ["get_dataloader"]


def get_dataloader(
    dataset: Dataset,
    shuffle: bool = False,
    seed: int = 1024,
    add_sampler: bool = True,
    drop_last: bool = False,
    pin_memory: bool = False,
    num_workers: int = 0,
    **kwargs: Any,
) -> DataLoader:
    """A DataLoader over `dataset` (Colossal-AI's `get_dataloader`).

    Under torch.distributed (with `add_sampler`), each process reads its own shard through a
    `DistributedSampler` seeded with `seed` (call its `set_epoch(epoch)` each epoch so the order changes between
    epochs and agrees between processes). Otherwise `shuffle` draws from a generator seeded with `seed`.
    Other keyword arguments (`batch_size`, `collate_fn`, ...) go to the DataLoader.
    """
    if "sampler" in kwargs or "batch_sampler" in kwargs:
        raise ValueError(
            "get_dataloader chooses the sampler itself; build a DataLoader directly to pass sampler= or batch_sampler=."
        )
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    if distributed and add_sampler:
        sampler: torch.utils.data.DistributedSampler[int] = torch.utils.data.DistributedSampler(
            dataset, shuffle=shuffle, seed=seed, drop_last=drop_last
        )
        return DataLoader(
            dataset, sampler=sampler, drop_last=drop_last, pin_memory=pin_memory, num_workers=num_workers, **kwargs
        )
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    return DataLoader(
        dataset,
        shuffle=shuffle,
        generator=generator,
        drop_last=drop_last,
        pin_memory=pin_memory,
        num_workers=num_workers,
        **kwargs,
    )
