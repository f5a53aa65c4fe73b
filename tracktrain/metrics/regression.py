"""Mean squared and mean absolute error, as in PyTorch-Ignite.

As in Ignite, the error sum runs over every element and is divided by the number of *samples* (`y.shape[0]`):
for `y_pred` of shape (N,) or (N, 1) that is the usual mean; for (N, D) it is the mean over samples of the
per-sample sum over the D outputs.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import Any

import torch

from tracktrain.metrics.distributed import all_reduce_sum
from tracktrain.metrics.inputs import accumulation_dtype, tensor_pair
from tracktrain.metrics.metric import Metric, NotComputableError

__all__ = ["MeanAbsoluteError", "MeanSquaredError", "RootMeanSquaredError"]


class _MeanError(Metric):
    """Sum of an elementwise error over all samples, divided by the number of samples."""

    _state_dict_all_req_keys = ("_sum_of_errors", "_num_examples")
    _sum_of_errors: torch.Tensor
    _num_examples: int

    @abstractmethod
    def _errors(self, difference: torch.Tensor) -> torch.Tensor:
        """The elementwise error of `y_pred - y`."""

    def reset(self) -> None:
        self._unsettle_device()
        self._sum_of_errors = torch.zeros((), dtype=accumulation_dtype(self._device), device=self._device)
        self._num_examples = 0

    def update(self, output: Any) -> None:
        name = type(self).__name__
        y_pred, y = tensor_pair(output, name)
        self._settle_device(y_pred.device)
        if y_pred.ndim == 0 or y.ndim == 0 or y.shape[0] != y_pred.shape[0] or y.numel() != y_pred.numel():
            raise ValueError(
                f"{name} got y_pred of shape {tuple(y_pred.shape)} and y of shape {tuple(y.shape)}: expected both "
                "(N, ...) with the same number of elements, e.g. (N,) and (N,), or (N, 1) and (N,)."
            )
        errors = self._errors(y_pred - y.reshape(y_pred.shape))
        self._sum_of_errors += errors.sum().to(self._sum_of_errors)
        self._num_examples += y.shape[0]

    def compute(self) -> float:
        total, examples = all_reduce_sum(self._sum_of_errors, self._num_examples)
        if examples == 0:
            raise NotComputableError(
                f"{type(self).__name__} must have at least one example before it can be "
                "computed; call update() after reset()."
            )
        return total.item() / examples  # host sync, once per compute()


class MeanSquaredError(_MeanError):
    """Mean of `(y_pred - y) ** 2` over samples (see the module docstring for multi-output shapes)."""

    def _errors(self, difference: torch.Tensor) -> torch.Tensor:
        return difference.square()


class MeanAbsoluteError(_MeanError):
    """Mean of `|y_pred - y|` over samples (see the module docstring for multi-output shapes)."""

    def _errors(self, difference: torch.Tensor) -> torch.Tensor:
        return difference.abs()


class RootMeanSquaredError(MeanSquaredError):
    """The square root of `MeanSquaredError` (Ignite's `ignite.metrics.RootMeanSquaredError`)."""

    def compute(self) -> float:
        return math.sqrt(super().compute())
