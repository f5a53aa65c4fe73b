"""Colossal-AI's `colossalai.nn.metric`: `Accuracy`, the number of correct predictions in a batch, the function
`hooks.AccuracyHook(accuracy_func)` counts with (over a run, `AccuracyHook` is tracktrain's `Accuracy` metric)."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["Accuracy"]


class Accuracy(nn.Module):
    """`Accuracy()(logits, targets)`: how many of the batch's arg-max predictions equal their targets (a tensor)."""

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.sum(torch.argmax(logits, dim=-1) == targets)
