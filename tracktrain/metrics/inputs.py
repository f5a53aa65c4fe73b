"""What a metric is given, checked and shaped: its `device` argument, the `(y_pred, y)` pair that `update()`
receives, batches of one for per-sample outputs, and the dtype it accumulates in on a device.

Shared by the `Metric` base (`metric.py`) and the metrics built on it; it imports nothing of theirs.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import torch

__all__ = [
    "accumulation_dtype",
    "as_batch_of_one",
    "as_device",
    "identity",
    "is_sequence_of_tensors_or_numbers",
    "same_shape_and_dtype",
    "tensor_pair",
]


def identity(output: Any) -> Any:
    """The default `output_transform`: the engine's output as it is."""
    return output


def as_device(device: str | torch.device, owner: str) -> torch.device:
    """`device` as a torch.device where a metric may accumulate, or a ValueError that names `owner` and the fix."""
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"{owner}: device={device!r} is not a torch device; use e.g. 'cpu' or 'cuda:0'.") from error
    if resolved.type == "xla":
        # as in Ignite: per-update accumulation on XLA devices is slow; accumulate on the CPU instead
        raise ValueError(f"{owner}: cannot accumulate on an XLA device ({device!r}); use device='cpu'.")
    return resolved


def is_sequence_of_tensors_or_numbers(value: Any) -> bool:
    return isinstance(value, Sequence) and all(isinstance(v, (torch.Tensor, numbers.Number)) for v in value)


def as_batch_of_one(value: torch.Tensor | numbers.Number, device: torch.device | None = None) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.unsqueeze(0)
    return torch.tensor([value], device=device)


def tensor_pair(output: Any, owner: str) -> tuple[torch.Tensor, torch.Tensor]:
    """`output` as `(y_pred, y)`, two tensors, or a TypeError that says what was given instead."""
    if not (isinstance(output, Sequence) and len(output) == 2):
        raise TypeError(
            f"{owner}.update() expects (y_pred, y), got {type(output).__name__}"
            f"{f' of length {len(output)}' if isinstance(output, Sequence) else ''}. Pass output_transform to "
            "turn the process function's output into (y_pred, y)."
        )
    y_pred, y = output
    if not (isinstance(y_pred, torch.Tensor) and isinstance(y, torch.Tensor)):
        raise TypeError(
            f"{owner}.update() expects y_pred and y as tensors, got {type(y_pred).__name__} and "
            f"{type(y).__name__}. Convert them with torch.as_tensor (in output_transform)."
        )
    return y_pred.detach(), y.detach()


def same_shape_and_dtype(output: Any, owner: str) -> tuple[torch.Tensor, torch.Tensor]:
    """`output` as `(y_pred, y)` of one shape and dtype (images compared pixel for pixel), or the error Ignite's
    PSNR and SSIM raise."""
    y_pred, y = tensor_pair(output, owner)
    if y_pred.dtype != y.dtype:
        raise TypeError(
            f"Expected y_pred and y to have the same data type. Got y_pred: {y_pred.dtype} and y: {y.dtype}."
        )
    if y_pred.shape != y.shape:
        raise ValueError(f"Expected y_pred and y to have the same shape. Got y_pred: {y_pred.shape} and y: {y.shape}.")
    return y_pred, y


def accumulation_dtype(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64
