"""`DataParallelStrategy`: what every strategy over the processes torchrun (or `tracktrain.distributed.spawn`)
starts has in common — the process group, this process's device, its shard of the data, the step as a module's
forward, and ending the fit together. `DDPStrategy` and `FSDPStrategy` differ only in how they wrap the model and
reduce its gradients."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, Sampler, SequentialSampler

from tracktrain.distributed import collectives as distributed
from tracktrain.trainer.strategies.base import ParallelStrategy

__all__ = [
    "DataParallelStrategy",
    "StepModule",
    "check_shard",
    "device_of",
    "join_process_group",
    "same_order_on_every_rank",
    "with_sampler",
]


class StepModule(nn.Module):
    """A LoopModule's steps as one module's forward, so that a wrapper that acts in forward (DDP prepares its
    gradient all-reduce there, FSDP gathers the parameters it shards) sees each step: `train_step` by default,
    or the step given (`eval_step`, `predict_step`)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, batch: Any, batch_idx: int, step: Callable[[Any, int], Any] | None = None) -> Any:
        return (step or self.module.train_step)(batch, batch_idx)  # type: ignore[operator]  # a LoopModule's


class DataParallelStrategy(ParallelStrategy):
    """Each process joins the group (nccl with CUDA, gloo without), trains on its own device and reads its own
    shard of the data (a `DistributedSampler` replaces the loader's sampler); the fit ends on every rank together.

    Args:
        timeout: how long a collective waits for the other ranks before the run fails
            (default `tracktrain.distributed.collective_timeout()`).
    """

    steps_in_lockstep = True

    def __init__(self, timeout: timedelta | None = None) -> None:
        super().__init__()
        self.timeout = timeout

    def setup_environment(self, device: torch.device) -> torch.device:
        return join_process_group(device, self.timeout)

    def distribute(self, loader: Iterable[Any], shuffle_default: bool, seed: int = 0) -> Iterable[Any]:
        """`loader` reading this process's shard: a DataLoader rebuilt around a DistributedSampler (shuffling
        if the loader shuffled), as it is when it already has one; other iterables are taken as sharded already."""
        if isinstance(loader, DataLoader) and isinstance(loader.sampler, DistributedSampler):
            check_shard(loader.sampler, self.data_shard(), self.name)
            return loader
        if not isinstance(loader, DataLoader):
            return loader
        if not isinstance(loader.sampler, (RandomSampler, SequentialSampler)) or loader.batch_sampler is None:
            raise ValueError(
                f"strategy={self.name!r} shards a DataLoader by replacing its sampler, but this one has a custom "
                f"{type(loader.sampler).__name__}. Give it a DistributedSampler yourself (or build the loader with "
                "tracktrain.get_dataloader)."
            )
        shuffle = isinstance(loader.sampler, RandomSampler)
        replicas, rank = self.data_shard()
        sampler: DistributedSampler = DistributedSampler(
            loader.dataset,
            num_replicas=replicas,
            rank=rank,
            shuffle=shuffle,
            seed=seed,
            drop_last=loader.drop_last,
        )
        return with_sampler(loader, sampler)

    def data_shard(self) -> tuple[int, int]:
        """How many shards the data is split into, and which this rank reads: one per rank here."""
        return self.world_size, self.global_rank

    def teardown(self) -> None:
        """Every rank ends the fit together (rank 0 may still be writing its last checkpoint)."""
        self.barrier()


def check_shard(sampler: DistributedSampler, shard: tuple[int, int], strategy: str) -> None:
    """ValueError unless a loader's own DistributedSampler reads the data shard the strategy gives this rank."""
    replicas, rank = shard
    if (sampler.num_replicas, sampler.rank) != (replicas, rank):
        raise ValueError(
            f"This DataLoader's DistributedSampler reads shard {sampler.rank} of {sampler.num_replicas}, but under "
            f"strategy={strategy!r} this rank reads shard {rank} of {replicas}: build it with "
            f"DistributedSampler(dataset, num_replicas={replicas}, rank={rank}), or give a plain DataLoader and let "
            "the strategy shard it."
        )


def same_order_on_every_rank(loader: Iterable[Any], strategy: str) -> Iterable[Any]:
    """`loader` in the same order on every rank (tensor and pipeline parallelism: the ranks compute one batch
    together). A shuffling DataLoader is left as it is: the training engine draws each pass's order from the run's
    seed, which every rank shares, so every rank reads the order one process reads with the same seed (and a
    parallel run can be checked against a one-process run)."""
    if isinstance(loader, DataLoader) and isinstance(loader.sampler, DistributedSampler):
        check_shard(loader.sampler, (1, 0), strategy)  # every rank reads all of it
        return loader
    if isinstance(loader, DataLoader) and not isinstance(loader.sampler, (RandomSampler, SequentialSampler)):
        raise ValueError(
            f"strategy={strategy!r} needs every rank to read the same batches, but this DataLoader has a "
            f"custom {type(loader.sampler).__name__}: seed it identically on every rank, or use shuffle=True."
        )
    return loader


def join_process_group(device: torch.device, timeout: timedelta | None) -> torch.device:
    """Join torchrun's process group; this process's device (with CUDA, the one of its LOCAL_RANK, made current
    before anything is put on a GPU)."""
    distributed.init_from_env(timeout=timeout)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    return device


def with_sampler(loader: DataLoader, sampler: Sampler, batch_size: int | None = None) -> DataLoader:
    """`loader` rebuilt around `sampler` (and with `batch_size` where given), every other option kept."""
    return DataLoader(
        loader.dataset,
        batch_size=loader.batch_size if batch_size is None else batch_size,
        sampler=sampler,
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        drop_last=loader.drop_last,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        generator=loader.generator,
        prefetch_factor=loader.prefetch_factor,
        persistent_workers=loader.persistent_workers,
        multiprocessing_context=loader.multiprocessing_context,
        pin_memory_device=loader.pin_memory_device,
        in_order=loader.in_order,
    )


def device_of(module: nn.Module) -> torch.device:
    parameter = next(module.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")
