"""`DDPStrategy`: torch.distributed data parallelism in the processes torchrun (or `tracktrain.distributed.spawn`)
starts."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
from torch import nn

from tracktrain.trainer.strategies.data_parallel import DataParallelStrategy, StepModule, device_of

__all__ = ["DDPStrategy"]


class DDPStrategy(DataParallelStrategy):
    """Each process joins the group (nccl with CUDA, gloo without), trains a full copy of the model on its own
    device and its own shard of the data (a `DistributedSampler` replaces the loader's sampler), and the gradients
    are all-reduced in backward by `DistributedDataParallel` — skipped on gradient-accumulation steps (`no_sync`).

    Args:
        timeout: how long a collective waits for the other ranks before the run fails
            (default `tracktrain.distributed.collective_timeout()`).
        find_unused_parameters: DistributedDataParallel's option, for models whose steps leave parameters unused.
    """

    name = "ddp"

    def __init__(self, timeout: timedelta | None = None, find_unused_parameters: bool = False) -> None:
        super().__init__(timeout)
        self.find_unused_parameters = find_unused_parameters
        self._wrapped: nn.parallel.DistributedDataParallel | None = None

    def setup_module(self, module: nn.Module, autocast_dtype: torch.dtype | None = None) -> Callable[[Any, int], Any]:
        device_ids = [module_device.index] if (module_device := device_of(module)).type == "cuda" else None
        self._wrapped = nn.parallel.DistributedDataParallel(
            StepModule(module), device_ids=device_ids, find_unused_parameters=self.find_unused_parameters
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
