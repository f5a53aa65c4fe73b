"""Lightning's data helpers: moving a batch to a device (the Trainer's own move), the workers a machine can give a
DataLoader, and whether a directory is shared by every rank."""

from __future__ import annotations

import os
from typing import Any

import torch

from tracktrain.engine.batches import move_to_device

__all__ = ["is_shared_filesystem", "move_data_to_device", "suggested_max_num_workers"]


def move_data_to_device(batch: Any, device: torch.device | str | int) -> Any:
    """`batch` (tensors in tuples, lists and dicts, at any depth) on `device`, as the Trainer moves each batch."""
    return move_to_device(batch, torch.device(device))


def suggested_max_num_workers(local_world_size: int) -> int:
    """The DataLoader workers each of `local_world_size` processes on this machine can have: the CPUs this process
    may use, shared, less one for the process itself (at least 1)."""
    if local_world_size < 1:
        raise ValueError(f"suggested_max_num_workers(local_world_size=...) must be >= 1, got {local_world_size}.")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cpus // local_world_size - 1)


def is_shared_filesystem(strategy: Any, path: str | os.PathLike | None = None, timeout: int = 3) -> bool:
    """Whether `path` (default: the working directory) is the same directory on every rank of `strategy`: each rank
    writes a file named after it there and the ranks check that they all see every one. One process: True."""
    import uuid

    world = getattr(strategy, "world_size", 1)
    if world <= 1:
        return True
    directory = os.fspath(path or os.getcwd())
    token = strategy.rank_zero_value(uuid.uuid4().hex)
    mine = os.path.join(directory, f".tracktrain-shared-{token}-{strategy.global_rank}")
    with open(mine, "w"):
        pass
    try:
        strategy.barrier()
        seen = all(
            os.path.exists(os.path.join(directory, f".tracktrain-shared-{token}-{rank}")) for rank in range(world)
        )
        return bool(min(strategy.gather(seen)))
    finally:
        os.remove(mine)
