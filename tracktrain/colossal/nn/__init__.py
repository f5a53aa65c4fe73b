"""Colossal-AI's `colossalai.nn`: its learning-rate schedulers (`lr_scheduler`, also at this package, as
`colossalai.nn.CosineAnnealingLR`) and `metric.Accuracy`. Colossal-AI's tensor-parallel layers, losses and
optimizers are not here (`docs/migration/colossal-ai.md` says what to use)."""

from __future__ import annotations

from tracktrain.colossal.nn import lr_scheduler, metric
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

__all__ = [
    "Accuracy",
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
]
