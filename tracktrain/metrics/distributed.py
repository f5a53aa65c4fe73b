"""The one all-reduce every metric's compute() goes through under torch.distributed."""

from __future__ import annotations

import numbers
from typing import Any

import torch

__all__ = ["all_reduce_sum"]


def _world_size() -> int:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def _collective_device() -> torch.device:
    # nccl reduces CUDA tensors only; gloo (and the rest) take CPU tensors
    if "nccl" in str(torch.distributed.get_backend()):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(*values: torch.Tensor | numbers.Number) -> tuple[Any, ...]:
    """Each value summed over all processes, in one collective; the values themselves when not distributed.

    Tensors come back as tensors of their own shape, dtype and device; Python numbers as Python numbers. Every
    process must call this with values of the same shapes, in the same order: metrics call it from `compute()`,
    so every rank must compute the same metrics.
    """
    world_size = _world_size()
    if world_size == 1:
        return values
    device = _collective_device()
    flat = [torch.as_tensor(value).detach().to(device=device, dtype=torch.float64).reshape(-1) for value in values]
    buffer = torch.cat(flat)
    torch.distributed.all_reduce(buffer)
    reduced: list[Any] = []
    # host copy only for the Python numbers (a sync, but compute() reads values anyway)
    host = buffer.tolist() if any(not isinstance(v, torch.Tensor) for v in values) else None
    start = 0
    for value, piece in zip(values, flat):
        stop = start + piece.numel()
        if isinstance(value, torch.Tensor):
            reduced.append(buffer[start:stop].reshape(value.shape).to(device=value.device, dtype=value.dtype))
        else:
            assert host is not None
            number = host[start]
            reduced.append(int(round(number)) if isinstance(value, numbers.Integral) else type(value)(number))
        start = stop
    return tuple(reduced)


# -------------------------------------------------------------------------------------------------------- Metric
