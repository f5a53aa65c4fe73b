"""Lightning's `measure_flops`: the floating-point operations of one call, counted by torch's `FlopCounterMode`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

__all__ = ["measure_flops"]


def measure_flops(
    model: nn.Module,
    forward_fn: Callable[[], torch.Tensor],
    loss_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> int:
    """The FLOPs of `forward_fn()` (and of the backward pass of `loss_fn(output)` when given), as torch counts them.
    Run it on a model on the meta device to count without computing (`with torch.device("meta"): model = ...`)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        output: Any = forward_fn()
        if loss_fn is not None:
            loss_fn(output).backward()
    return int(counter.get_total_flops())
