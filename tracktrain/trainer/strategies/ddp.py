"""`DDPStrategy`: torch.distributed data parallelism in the processes torchrun (or `tracktrain.distributed.spawn`)
starts."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, SequentialSampler

from tracktrain import distributed
from tracktrain.trainer.strategies.base import Strategy

__all__ = ["DDPStrategy"]


class _TrainStep(nn.Module):
    """The module's `train_step` as a forward, so DistributedDataParallel sees each step's forward pass (it
    prepares its gradient all-reduce there)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, batch: Any, batch_idx: int) -> Any:
        return self.module.train_step(batch, batch_idx)  # type: ignore[operator]  # a LoopModule's, not a Tensor


class DDPStrategy(Strategy):
    """Each process joins the group (nccl with CUDA, gloo without), trains on its own device and its own shard of
    the data (a `DistributedSampler` replaces the loader's sampler), and the gradients are all-reduced in
    backward by `DistributedDataParallel` — skipped on gradient-accumulation steps (`no_sync`).

    Args:
        timeout: how long a collective waits for the other ranks before the run fails
            (default `tracktrain.distributed.collective_timeout()`).
        find_unused_parameters: DistributedDataParallel's option, for models whose steps leave parameters unused.
    """

    name = "ddp"
    steps_in_lockstep = True

    def __init__(self, timeout: timedelta | None = None, find_unused_parameters: bool = False) -> None:
        super().__init__()
        self.timeout = timeout
        self.find_unused_parameters = find_unused_parameters
        self._wrapped: nn.parallel.DistributedDataParallel | None = None

    def setup_environment(self, device: torch.device) -> torch.device:
        distributed.init_from_env(timeout=self.timeout)
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
            torch.cuda.set_device(device)
        return device

    def setup_module(self, module: nn.Module) -> Callable[[Any, int], Any]:
        device_ids = [module_device.index] if (module_device := _device_of(module)).type == "cuda" else None
        self._wrapped = nn.parallel.DistributedDataParallel(
            _TrainStep(module), device_ids=device_ids, find_unused_parameters=self.find_unused_parameters
        )
        return self._wrapped

    @property
    def wrapped_model(self) -> nn.parallel.DistributedDataParallel | None:
        """The DistributedDataParallel around the module being fit (for communication hooks, say)."""
        return self._wrapped

    def no_sync(self) -> contextlib.AbstractContextManager:
        assert self._wrapped is not None, "setup_module() first"
        return self._wrapped.no_sync()

    def reduce_gradients(self, module: nn.Module) -> None:
        """Average the gradients over the ranks, as DDP does in backward. For an accumulation window whose every
        batch ran under `no_sync`: the last one of an epoch over a loader without a length, whose end shows only
        after its last batch. (A parameter without a gradient counts as zeros, and gets one if another rank's is
        not zero: every rank makes the same collective, and the same step.)"""
        parameters = [parameter for parameter in module.parameters() if parameter.requires_grad]
        if not parameters:
            return
        flat = torch.cat(
            [
                (parameter.grad if parameter.grad is not None else torch.zeros_like(parameter)).reshape(-1)
                for parameter in parameters
            ]
        )
        flat.div_(torch.distributed.get_world_size())
        torch.distributed.all_reduce(flat)
        offset = 0
        for parameter in parameters:
            reduced = flat[offset : offset + parameter.numel()].view_as(parameter)
            offset += parameter.numel()
            if parameter.grad is not None:
                parameter.grad.copy_(reduced)
            elif reduced.any():
                parameter.grad = reduced.to(parameter.dtype).clone()

    def distribute(self, loader: Iterable[Any], shuffle_default: bool) -> Iterable[Any]:
        """`loader` reading this process's shard: a DataLoader rebuilt around a DistributedSampler (shuffling
        if the loader shuffled), as it is when it already has one; other iterables are taken as sharded already."""
        if not isinstance(loader, DataLoader) or isinstance(loader.sampler, DistributedSampler):
            return loader
        if not isinstance(loader.sampler, (RandomSampler, SequentialSampler)) or loader.batch_sampler is None:
            raise ValueError(
                f"strategy='ddp' shards a DataLoader by replacing its sampler, but this one has a custom "
                f"{type(loader.sampler).__name__}. Give it a DistributedSampler yourself (or build the loader with "
                "tracktrain.get_dataloader)."
            )
        shuffle = isinstance(loader.sampler, RandomSampler)
        sampler: DistributedSampler = DistributedSampler(
            loader.dataset, shuffle=shuffle, seed=self.seed, drop_last=loader.drop_last
        )
        return DataLoader(
            loader.dataset,
            batch_size=loader.batch_size,
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

    def teardown(self) -> None:
        """Every rank ends the fit together (rank 0 may still be writing its last checkpoint)."""
        self.barrier()


def _device_of(module: nn.Module) -> torch.device:
    parameter = next(module.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")
