"""Lightning's `utilities.memory`: `garbage_collection_cuda` and `get_model_size_mb`."""

from __future__ import annotations

import gc

import torch
from torch import nn

__all__ = ["garbage_collection_cuda", "get_model_size_mb"]


def garbage_collection_cuda() -> None:
    """Collect Python's garbage and give CUDA's cached memory back (nothing to give without CUDA)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def get_model_size_mb(model: nn.Module) -> float:
    """The size of the model's parameters and buffers, in MB."""
    return sum(tensor.numel() * tensor.element_size() for tensor in [*model.parameters(), *model.buffers()]) / 1e6
