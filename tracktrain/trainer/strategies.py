"""Strategies: how the Trainer spreads a fit over devices and processes. A strategy wraps the model and the data,
never the loop: the same step runs under each (single device, DDP)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, SequentialSampler

from tracktrain import distributed
from tracktrain.xla import device_loader, mark_step, xla_device, xla_model

__all__ = ["DDPStrategy", "SingleDeviceStrategy", "XLAStrategy", "strategy_for"]


class SingleDeviceStrategy:
    """One process, one device: the module's own `train_step`, the loaders as given."""

    name = "single_device"

    def setup(self, device: torch.device) -> torch.device:
        return device

    def train_forward(self, module: nn.Module) -> Callable[[Any, int], Any]:
        return module.train_step  # type: ignore[return-value]

    def no_sync(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def distribute(self, loader: Iterable[Any], shuffle_default: bool) -> Iterable[Any]:
        return loader

    def reduce_gradients(self, module: nn.Module) -> None:
        """Reduce gradients that backward left unreduced (see `DDPStrategy.reduce_gradients`): none here."""

    def finish(self) -> None:
        pass

    def model_engine_options(self, optimizer: torch.optim.Optimizer | None) -> dict[str, Any]:
        """How the ModelEngine steps under this strategy (gradient handlers, the optimizer step)."""
        return {}


class _TrainStep(nn.Module):
    """The module's `train_step` as a forward, so DistributedDataParallel sees each step's forward pass (it
    prepares its gradient all-reduce there)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, batch: Any, batch_idx: int) -> Any:
        return self.module.train_step(batch, batch_idx)


class DDPStrategy:
    """torch.distributed data parallelism, in the processes torchrun (or `tracktrain.distributed.spawn`) starts.

    Each process joins the group (nccl with CUDA, gloo without), trains on its own device and its own shard of
    the data (a `DistributedSampler` replaces the loader's sampler), and the gradients are all-reduced in
    backward by `DistributedDataParallel` — skipped on gradient-accumulation steps (`no_sync`). `timeout`: how
    long a collective waits for the other ranks before the run fails (`tracktrain.distributed.collective_timeout`).
    """

    name = "ddp"

    def __init__(self, timeout: timedelta | None = None, find_unused_parameters: bool = False) -> None:
        self.timeout = timeout
        self.find_unused_parameters = find_unused_parameters
        self._wrapped: nn.parallel.DistributedDataParallel | None = None
        self.seed = 0

    def setup(self, device: torch.device) -> torch.device:
        """Join the process group; returns this process's device."""
        distributed.init_from_env(timeout=self.timeout)
        if device.type == "cuda":
            import os

            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
            torch.cuda.set_device(device)
        return device

    def train_forward(self, module: nn.Module) -> Callable[[Any, int], Any]:
        device_ids = [module_device.index] if (module_device := _device_of(module)).type == "cuda" else None
        self._wrapped = nn.parallel.DistributedDataParallel(
            _TrainStep(module), device_ids=device_ids, find_unused_parameters=self.find_unused_parameters
        )
        return self._wrapped

    def no_sync(self) -> contextlib.AbstractContextManager:
        assert self._wrapped is not None, "train_forward() first"
        return self._wrapped.no_sync()

    def reduce_gradients(self, module: nn.Module) -> None:
        """Average the gradients over the ranks, as DDP does in backward. For an accumulation window whose every
        batch ran under `no_sync`: the last one of an epoch over a loader without a length, whose end shows only
        after its last batch. (A parameter without a gradient counts as zeros, and gets one if another rank's is
        not zero: every rank makes the same collective, and the same step.)"""
        parameters = [parameter for parameter in module.parameters() if parameter.requires_grad]
        if not parameters:
            return
        flat = torch.cat([
            (parameter.grad if parameter.grad is not None else torch.zeros_like(parameter)).reshape(-1)
            for parameter in parameters
        ])
        flat.div_(torch.distributed.get_world_size())
        torch.distributed.all_reduce(flat)
        offset = 0
        for parameter in parameters:
            reduced = flat[offset:offset + parameter.numel()].view_as(parameter)
            offset += parameter.numel()
            if parameter.grad is not None:
                parameter.grad.copy_(reduced)
            elif reduced.any():
                parameter.grad = reduced.to(parameter.dtype).clone()

    def finish(self) -> None:
        """Every rank ends the fit together (rank 0 may still be writing its last checkpoint)."""
        torch.distributed.barrier()

    def model_engine_options(self, optimizer: torch.optim.Optimizer | None) -> dict[str, Any]:
        return {}  # DistributedDataParallel reduces the gradients in backward

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
        sampler = DistributedSampler(loader.dataset, shuffle=shuffle, seed=self.seed, drop_last=loader.drop_last)
        return DataLoader(
            loader.dataset, batch_size=loader.batch_size, sampler=sampler, num_workers=loader.num_workers,
            collate_fn=loader.collate_fn, pin_memory=loader.pin_memory, drop_last=loader.drop_last,
            timeout=loader.timeout, worker_init_fn=loader.worker_init_fn, generator=loader.generator,
            prefetch_factor=loader.prefetch_factor, persistent_workers=loader.persistent_workers,
            multiprocessing_context=loader.multiprocessing_context, pin_memory_device=loader.pin_memory_device,
            in_order=loader.in_order,
        )


class XLAStrategy(SingleDeviceStrategy):
    """An XLA device (TPU, or the CPU with PJRT_DEVICE=CPU) through torch_xla, imported when a fit starts.

    Batches reach the device through torch_xla's `MpDeviceLoader` (which also cuts the lazy graph once per
    batch); the optimizer step all-reduces gradients across replicas first (a no-op on one device) and marks the
    step, so clipping sees the reduced gradients.
    """

    name = "xla"

    def setup(self, device: torch.device) -> torch.device:
        self._xm = xla_model()
        self.device = xla_device()
        return self.device

    def model_engine_options(self, optimizer: torch.optim.Optimizer | None) -> dict[str, Any]:
        xm = self._xm

        def step_and_mark(optimizer: torch.optim.Optimizer) -> None:
            optimizer.step()
            mark_step()

        handlers = [] if optimizer is None else [lambda: xm.reduce_gradients(optimizer)]
        return {"gradient_handlers": handlers, "optimizer_step": step_and_mark}

    def distribute(self, loader: Iterable[Any], shuffle_default: bool) -> Iterable[Any]:
        return device_loader(loader, self.device)


def strategy_for(name: str) -> SingleDeviceStrategy | DDPStrategy:
    if name == "ddp":
        return DDPStrategy()
    if name == "xla":
        return XLAStrategy()
    return SingleDeviceStrategy()


def _device_of(module: nn.Module) -> torch.device:
    parameter = next(module.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")
