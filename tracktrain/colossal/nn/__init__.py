"""Colossal-AI's `colossalai.nn`: its learning-rate schedulers (`lr_scheduler`, also at this package, as
`colossalai.nn.CosineAnnealingLR`), `metric.Accuracy` and the optimizers torch has (`optimizer`: `FusedSGD`,
`FusedAdam`, `CPUAdam`, `HybridAdam`). Colossal-AI's tensor-parallel layers and losses are not here
(`docs/migration/colossal-ai.md` says what to use)."""

from __future__ import annotations

from tracktrain.colossal.nn import lr_scheduler, metric, optimizer
from tracktrain.colossal.nn.lr_scheduler import (
    CosineAnnealingLR,
    CosineAnnealingWarmupLR,
    ExponentialLR,
    FlatAnnealingLR,
    FlatAnnealingWarmupLR,
    LambdaLR,
    LinearWarmupLR,
    MultiplicativeLR,
    MultiStepLR,
    MultiStepWarmupLR,
    OneCycleLR,
    PolynomialLR,
    PolynomialWarmupLR,
    StepLR,
)
from tracktrain.colossal.nn.metric import Accuracy
from tracktrain.colossal.nn.optimizer import CPUAdam, FusedAdam, FusedSGD, HybridAdam

__all__ = [
    "Accuracy",
    "CPUAdam",
    "FusedAdam",
    "FusedSGD",
    "HybridAdam",
    "CosineAnnealingLR",
    "CosineAnnealingWarmupLR",
    "ExponentialLR",
    "FlatAnnealingLR",
    "FlatAnnealingWarmupLR",
    "LambdaLR",
    "LinearWarmupLR",
    "MultiStepLR",
    "MultiStepWarmupLR",
    "MultiplicativeLR",
    "OneCycleLR",
    "PolynomialLR",
    "PolynomialWarmupLR",
    "StepLR",
    "lr_scheduler",
    "metric",
    "optimizer",
]


def __getattr__(name: str) -> object:
    """Colossal-AI's optimizers without a torch counterpart say so (`tracktrain.colossal.nn.optimizer`)."""
    return getattr(optimizer, name)
