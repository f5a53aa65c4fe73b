"""Fbeta (Ignite's `ignite.metrics.fbeta`): the weighted harmonic mean of precision and recall, built on `Precision`
and `Recall` (per class) as a `MetricsLambda`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from tracktrain.checks.numeric import is_real
from tracktrain.metrics.inputs import identity
from tracktrain.metrics.metric import MetricsLambda
from tracktrain.metrics.precision import Precision
from tracktrain.metrics.recall import Recall

__all__ = ["Fbeta"]


def Fbeta(  # noqa: N802 - Ignite's name: it reads as a metric's
    beta: float,
    average: bool = True,
    precision: Precision | None = None,
    recall: Recall | None = None,
    output_transform: Callable[[Any], Any] | None = None,
    device: str | torch.device | None = None,
) -> MetricsLambda:
    """`(1 + beta²) · P · R / (beta² · P + R)` per class, their mean (a float) with `average=True`.

    `precision` and `recall`, when given, must be per class (`average=False`); otherwise they are made with
    `output_transform` and `device`.
    """
    if not (is_real(beta) and beta > 0):
        raise ValueError(f"Beta should be a positive integer, but given {beta}")
    for name, given in (("precision", precision), ("recall", recall)):
        if given is None:
            continue
        if output_transform is not None:
            raise ValueError(f"If {name} argument is provided, output_transform should be None")
        if device is not None:
            raise ValueError(f"If {name} argument is provided, device should be None")
        if given._average:
            raise ValueError(f"Input {name} metric should have average=False")
    transform = output_transform or identity
    if precision is None:
        precision = Precision(transform, average=False, device=recall._requested_device if recall else device)
    if recall is None:
        recall = Recall(transform, average=False, device=precision._requested_device)
    squared = beta**2
    per_class = MetricsLambda(lambda p, r: (1.0 + squared) * p * r / (squared * p + r + 1e-15), precision, recall)
    return MetricsLambda(lambda values: values.mean().item(), per_class) if average else per_class
