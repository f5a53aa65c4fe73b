"""Batches on their way into a step: moved to a device, split into inputs and targets. One implementation of
each, for the Ignite-style steps, `ModelEngine`'s schedule and the Trainer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["convert_tensor", "move_to_device", "split_batch"]

Device = str | torch.device | None


def convert_tensor(value: Any, device: Device = None, non_blocking: bool = False) -> Any:
    """Move tensors, also inside lists, tuples, named tuples and dicts, to `device`; other values pass through."""
    if device is None:
        return value
    if isinstance(value, torch.Tensor):
        return value.to(device=device, non_blocking=non_blocking)
    if isinstance(value, Mapping):
        return type(value)({k: convert_tensor(v, device, non_blocking) for k, v in value.items()})  # type: ignore[call-arg]
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
        return type(value)(*(convert_tensor(v, device, non_blocking) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(convert_tensor(v, device, non_blocking) for v in value)
    return value


def move_to_device(batch: Any, device: torch.device) -> Any:
    """`batch` with every tensor in it moved to `device`, without waiting for the copy (the step's first use of
    the tensors orders after it on the device's stream)."""
    return convert_tensor(batch, device, non_blocking=True)


def split_batch(batch: Any, expected_by: str, fix: str) -> tuple[Any, Any]:
    """`(inputs, targets)` of a two-part batch; any other layout is refused naming `expected_by`, with `fix`."""
    try:
        inputs, targets = batch
    except (TypeError, ValueError):
        length = f" of length {len(batch)}" if hasattr(batch, "__len__") else ""
        raise ValueError(
            f"{expected_by} expects (inputs, targets) batches, got {type(batch).__name__}{length}. {fix}"
        ) from None
    return inputs, targets
