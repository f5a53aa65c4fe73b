"""The one all-reduce every metric's compute() goes through under torch.distributed (`tracktrain.distributed.collectives`'s: the
metrics sit below the trainer, so they reduce without its Strategy)."""

from __future__ import annotations

import numbers
from typing import Any

import torch

from tracktrain.distributed.collectives import all_reduce_tensor, collective_device

__all__ = ["all_reduce_sum", "common_shape"]

# common_shape's fixed-length descriptor: every rank must send the same number of elements
_MAX_SHAPE_DIMS = 32


def process_count() -> int:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def all_reduce_sum(*values: torch.Tensor | float) -> tuple[Any, ...]:  # float: int and float, as PEP 484
    """Each value summed over all processes, in one collective; the values themselves when not distributed.

    Tensors come back as tensors of their own shape, dtype and device; Python numbers as Python numbers. Every
    process must call this with values of the same shapes, in the same order: metrics call it from `compute()`,
    so every rank must compute the same metrics.
    """
    world_size = process_count()
    if world_size == 1:
        return values
    device = collective_device()
    flat = [torch.as_tensor(value).detach().to(device=device, dtype=torch.float64).reshape(-1) for value in values]
    buffer = all_reduce_tensor(torch.cat(flat), "sum")
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


def common_shape(shape: torch.Size | None, owner: str) -> torch.Size | None:
    """The shape that the processes with data have, `shape` itself when not distributed; None when none has data.

    For state whose shape is set by the first update (a rank without updates has no shape): ranks without data
    then contribute zeros of the common shape, so that every rank's all-reduce has the same length. One small
    all-reduce (max) of each rank's shape and its negation finds the largest and smallest shape at once; if they
    differ, every rank raises the same ValueError (none goes on to a collective the others skip).
    """
    if process_count() == 1:
        return shape
    if shape is not None and len(shape) > _MAX_SHAPE_DIMS:
        raise ValueError(
            f"{owner}: a sample of {len(shape)} dimensions {tuple(shape)} cannot be reduced across processes (at most "
            f"{_MAX_SHAPE_DIMS}); flatten the samples in output_transform."
        )
    width = 1 + _MAX_SHAPE_DIMS
    # per rank: (ndim, sizes..., padded with 0) and its negation; -1 (no data) is below every real value
    descriptor = torch.full((2 * width,), -1, dtype=torch.int64)
    if shape is not None:
        sizes = torch.zeros(width, dtype=torch.int64)
        sizes[0] = len(shape)
        sizes[1 : 1 + len(shape)] = torch.tensor(shape, dtype=torch.int64)
        descriptor = torch.cat([sizes, -sizes])
    else:
        descriptor[width:] = -(2**62)  # the negated half: below every negated real value
    descriptor = descriptor.to(collective_device())
    torch.distributed.all_reduce(descriptor, op=torch.distributed.ReduceOp.MAX)
    largest, smallest = descriptor[:width].tolist(), (-descriptor[width:]).tolist()  # host sync, in compute()
    if largest[0] == -1:
        return None
    if largest != smallest:
        raise ValueError(
            f"{owner}: the processes accumulated samples of different shapes (largest "
            f"{tuple(largest[1 : 1 + largest[0]])}, smallest {tuple(smallest[1 : 1 + smallest[0]])}); every process "
            "must give samples of the same shape."
        )
    return torch.Size(largest[1 : 1 + largest[0]])
