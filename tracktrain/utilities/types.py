"""Lightning's `utilities.types`: the type names programs annotate their steps and `configure_optimizers` with."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = ["EVAL_DATALOADERS", "OptimizerLRScheduler", "STEP_OUTPUT", "TRAIN_DATALOADERS"]

STEP_OUTPUT = torch.Tensor | Mapping[str, Any] | None
TRAIN_DATALOADERS = Any
EVAL_DATALOADERS = Any
OptimizerLRScheduler = torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | Mapping[str, Any] | Any | None
