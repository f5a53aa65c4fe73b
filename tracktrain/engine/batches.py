"""Batches on their way into a step: moved to a device, split into inputs and targets. One implementation of
each, for the Ignite-style steps, `ModelEngine`'s schedule and the Trainer."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

__all__ = ["apply_to_type", "cast_floating", "convert_tensor", "move_to_device", "split_batch"]

Device = str | torch.device | None


def convert_tensor(value: Any, device: Device = None, non_blocking: bool = False) -> Any:
    """Move tensors, also inside lists, tuples, named tuples and dicts, to `device`; other values pass through."""
    if device is None:
        return value
    return _map_tensors(value, lambda tensor: tensor.to(device=device, non_blocking=non_blocking))


def cast_floating(value: Any, dtype: torch.dtype) -> Any:
    """`value` with every floating-point tensor in it cast to `dtype` (a "true" precision's inputs); integer tensors
    (labels, indices) keep their dtype."""
    return _map_tensors(value, lambda tensor: tensor.to(dtype) if tensor.is_floating_point() else tensor)


def _map_tensors(value: Any, convert: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """`convert` applied to every tensor in `value`, also inside lists, tuples, named tuples and dicts."""
    return _map(value, torch.Tensor, convert, keep_others=True)


def apply_to_type(value: Any, input_type: type | tuple[type, ...], func: Callable[[Any], Any]) -> Any:
    """`func` applied to every object of `input_type` in `value`, also inside mappings, named tuples and sequences
    (each rebuilt with its own type); strings and bytes pass through (Ignite's `ignite.utils.apply_to_type`).

    Any other object is refused with a TypeError, as in Ignite: the caller said what the leaves are."""
    return _map(value, input_type, func, keep_others=False)


def _map(value: Any, input_type: type | tuple[type, ...], func: Callable[[Any], Any], keep_others: bool) -> Any:
    if isinstance(value, input_type):
        return func(value)
    if isinstance(value, (str, bytes)):
        return value
    if isinstance(value, Mapping):
        return type(value)({k: _map(v, input_type, func, keep_others) for k, v in value.items()})  # type: ignore[call-arg]
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
        return type(value)(*(_map(v, input_type, func, keep_others) for v in value))
    if isinstance(value, (list, tuple)) or (not keep_others and isinstance(value, Sequence)):
        return type(value)([_map(v, input_type, func, keep_others) for v in value])  # type: ignore[call-arg]
    if keep_others:
        return value
    raise TypeError(
        f"x must contain {input_type}, dicts or lists; found {type(value)} ({value!r}). Give only objects of that "
        "type inside (nested) mappings and sequences, or convert the other values first."
    )


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
