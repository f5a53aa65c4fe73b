"""Colossal-AI's `colossalai.utils`: `get_dataloader`, `MultiTimer` and `Timer`, the device helpers and the rank
tests of its global context.

`get_dataloader` shards the dataset over the data-parallel group of the global context (the ranks of one pipeline
stage, or every rank without a pipeline), as Colossal-AI's `DataParallelSampler` does; with a single data-parallel
rank it is tracktrain's `get_dataloader`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from tracktrain.colossal.context.parallel_context import global_context as gpc
from tracktrain.colossal.context.parallel_mode import ParallelMode
from tracktrain.distributed.data import get_dataloader as _plain_dataloader
from tracktrain.handlers.multi_timer import MultiTimer
from tracktrain.handlers.multi_timer import StopWatch as Timer

__all__ = [
    "MultiTimer",
    "Timer",
    "conditional_context",
    "empty_cache",
    "get_current_device",
    "get_dataloader",
    "is_dp_rank_0",
    "is_no_pp_or_last_stage",
    "is_tp_rank_0",
    "is_using_ddp",
    "is_using_pp",
    "is_using_sequence",
    "print_rank_0",
    "synchronize",
]


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
    """A DataLoader over `dataset`; with `add_sampler` and several data-parallel ranks, each reads its own shard
    (shuffled with `seed` when `shuffle`). Other keyword arguments (`batch_size`, ...) go to the DataLoader."""
    if add_sampler and is_using_ddp():
        if "sampler" in kwargs or "batch_sampler" in kwargs:
            raise ValueError(
                "get_dataloader(add_sampler=True) chooses the sampler; pass add_sampler=False to give one."
            )
        sampler: DistributedSampler[int] = DistributedSampler(
            dataset,
            num_replicas=gpc.get_world_size(ParallelMode.DATA),
            rank=gpc.get_local_rank(ParallelMode.DATA),
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
        )
        return DataLoader(
            dataset, sampler=sampler, drop_last=drop_last, pin_memory=pin_memory, num_workers=num_workers, **kwargs
        )
    return _plain_dataloader(
        dataset,
        shuffle=shuffle,
        seed=seed,
        add_sampler=add_sampler and not gpc.is_initialized(ParallelMode.DATA),
        drop_last=drop_last,
        pin_memory=pin_memory,
        num_workers=num_workers,
        **kwargs,
    )


def get_current_device() -> torch.device:
    """This process's CUDA device when there is one, else the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def synchronize() -> None:
    """Wait for the CUDA device's queued work (nothing to wait for on the CPU)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def empty_cache() -> None:
    """Release the CUDA caching allocator's unused memory (nothing on the CPU)."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _size(mode: ParallelMode) -> int:
    return gpc.get_world_size(mode) if gpc.is_initialized(mode) else 1


def is_using_ddp() -> bool:
    """Whether there are several data-parallel ranks."""
    return _size(ParallelMode.DATA) > 1


def is_using_pp() -> bool:
    """Whether the model is a pipeline over several ranks."""
    return _size(ParallelMode.PIPELINE) > 1


def is_using_sequence() -> bool:
    """Whether sequence parallelism is on (never: it is a tensor-parallel mode, refused by `launch`)."""
    return False


def is_dp_rank_0() -> bool:
    """Whether this is the first rank of its data-parallel group."""
    return not gpc.is_initialized(ParallelMode.DATA) or gpc.is_first_rank(ParallelMode.DATA)


def is_tp_rank_0() -> bool:
    """Whether this is the first rank of its tensor-parallel group (always: its size is 1)."""
    return not gpc.is_initialized(ParallelMode.TENSOR) or gpc.is_first_rank(ParallelMode.TENSOR)


def is_no_pp_or_last_stage() -> bool:
    """Whether there is no pipeline or this rank holds its last stage (where the loss and outputs are)."""
    return not is_using_pp() or gpc.is_last_rank(ParallelMode.PIPELINE)


def print_rank_0(msg: str, logger: Any = None) -> None:
    """Print `msg` (or log it through `logger`) on global rank 0 only."""
    if not gpc.is_initialized(ParallelMode.GLOBAL) or gpc.get_global_rank() == 0:
        if logger is None:
            print(msg, flush=True)
        else:
            logger.info(msg)


@contextlib.contextmanager
def conditional_context(context_manager: contextlib.AbstractContextManager, enable: bool = True) -> Iterator[None]:
    """Enter `context_manager` only when `enable`."""
    with context_manager if enable else contextlib.nullcontext():
        yield
