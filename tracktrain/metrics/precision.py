"""Precision, and the base it shares with Recall (Ignite's `ignite.metrics.precision`): per class, or averaged
("macro", "micro", "weighted", and "samples" for multilabel inputs), of binary, multiclass or multilabel inputs.

The kinds of input are `Accuracy`'s (`ClassificationMetric`: decided from shapes, no host sync in `update()`).
Ignite reads the largest class index of every multiclass batch back to the host to refuse one beyond the scores'
classes; here such targets are counted on the device and `compute()` refuses them, naming how many.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from tracktrain.metrics.accuracy import ClassificationMetric
from tracktrain.metrics.distributed import all_reduce_sum, common_shape
from tracktrain.metrics.inputs import accumulation_dtype, identity, tensor_pair
from tracktrain.metrics.metric import NotComputableError

__all__ = ["Precision", "PrecisionRecall"]

AVERAGES = ("macro", "micro", "weighted", "samples")


class PrecisionRecall(ClassificationMetric):
    """What Precision and Recall share: the per-batch one-hot predictions and targets, the sums, `compute()`.

    Args:
        average: False (default): one value per class, a tensor (for binary input, of the positive class only);
            True or "macro": their mean; "micro": from the counts over all classes; "weighted": the classes' values
            weighted by their number of targets; "samples" (multilabel only): the mean of each sample's value.
        is_multilabel, output_transform, device, skip_unrolling: as `Accuracy`.
    """

    _state_dict_all_req_keys = (
        "_numerator",
        "_denominator",
        "_weight",
        "_updated",
        "_invalid_targets",
        "_non_binary_y_pred",
        "_non_binary_y",
        "_kind",
        "_num_classes",
    )
    _numerator: torch.Tensor
    _denominator: torch.Tensor
    _weight: torch.Tensor
    _updated: bool
    _invalid_targets: torch.Tensor

    def __init__(
        self,
        output_transform: Callable[[Any], Any] = identity,
        average: bool | str | None = False,
        is_multilabel: bool = False,
        device: str | torch.device | None = None,
        skip_unrolling: bool = False,
    ) -> None:
        if not (average is None or isinstance(average, bool) or average in AVERAGES):
            raise ValueError(
                "Argument average should be None or a boolean or one of values 'macro', 'micro', 'weighted' and "
                f"'samples', got {average!r}."
            )
        self._average = "macro" if average is True else average
        self.eps = 1e-20
        super().__init__(
            output_transform=output_transform, is_multilabel=is_multilabel, device=device, skip_unrolling=skip_unrolling
        )

    def reset(self) -> None:
        self._unsettle_device()
        dtype = accumulation_dtype(self._device)
        # 0-dim until the first update gives them one value per class (where the average keeps classes)
        self._numerator = torch.zeros((), dtype=dtype, device=self._device)
        self._denominator = torch.zeros((), dtype=dtype, device=self._device)
        self._weight = torch.zeros((), dtype=dtype, device=self._device)
        self._invalid_targets = torch.zeros((), dtype=torch.int64, device=self._device)
        self._updated = False
        self._reset_kind()

    def _one_hot(self, output: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The batch as (predicted, actual, both): (N, C) 0/1 rows (binary without average: flat 0/1 vectors)."""
        name = type(self).__name__
        y_pred, y = tensor_pair(output, name)
        self._settle_device(y_pred.device)
        kind = self._check_kind(y_pred, y)
        if kind in ("binary", "multiclass") and self._average == "samples":
            raise ValueError(
                f"Argument average='samples' is incompatible with binary and multiclass input data ({name} got "
                f"{kind} input); use average='micro', 'macro' or 'weighted'."
            )
        if kind == "multilabel":
            labels = y_pred.shape[1]
            predicted = y_pred.transpose(1, -1).reshape(-1, labels)
            actual = y.transpose(1, -1).reshape(-1, labels)
        elif kind == "binary" and self._average is False:
            predicted, actual = y_pred.reshape(-1), y.reshape(-1)
        else:
            classes = 2 if kind == "binary" else y_pred.shape[1]
            targets = y.reshape(-1).long()
            valid = (targets >= 0) & (targets < classes)
            self._invalid_targets += (~valid).sum().to(self._device)
            indices = y_pred.reshape(-1).long() if kind == "binary" else y_pred.argmax(dim=1).reshape(-1)
            actual = _one_hot(targets.clamp(0, classes - 1), classes) * valid.unsqueeze(1)
            predicted = _one_hot(indices.clamp(0, classes - 1), classes)
        dtype = accumulation_dtype(self._device)
        predicted = predicted.to(dtype=dtype, device=self._device)
        actual = actual.to(dtype=dtype, device=self._device)
        return predicted, actual, predicted * actual

    def _accumulate(self, positives: torch.Tensor, actual: torch.Tensor, correct: torch.Tensor) -> None:
        """Add a batch: `positives` are the predicted (precision) or actual (recall) ones."""
        if self._average == "samples":
            self._numerator = self._numerator + (correct.sum(dim=1) / (positives.sum(dim=1) + self.eps)).sum()
            self._denominator = self._denominator + actual.shape[0]
        elif self._average == "micro":
            self._numerator = self._numerator + correct.sum()
            self._denominator = self._denominator + positives.sum()
        else:
            self._numerator = self._numerator + correct.sum(dim=0)
            self._denominator = self._denominator + positives.sum(dim=0)
            if self._average == "weighted":
                self._weight = self._weight + actual.sum(dim=0)
        self._updated = True

    def compute(self) -> torch.Tensor | float:
        name = type(self).__name__
        shape = common_shape(self._numerator.shape if self._updated else None, name)
        if shape is None:
            raise NotComputableError(
                f"{name} must have at least one example before it can be computed; call update() after reset()."
            )
        local = [self._numerator, self._denominator, self._weight]
        if not self._updated:  # a rank without data adds zeros of the others' shape
            local = [value.new_zeros(shape) for value in local]
        numerator, denominator, weight, invalid, non_binary_y_pred, non_binary_y = all_reduce_sum(
            *local, self._invalid_targets, self._non_binary_y_pred, self._non_binary_y
        )
        # the one host sync of compute()
        invalid, non_binary_y_pred, non_binary_y = torch.stack([invalid, non_binary_y_pred, non_binary_y]).tolist()
        self._raise_if_not_binary(non_binary_y_pred, non_binary_y)
        if invalid:
            raise ValueError(
                f"y_pred contains fewer classes than y: {name} got {invalid} target(s) outside the {self._num_classes} "
                "classes of the scores (or outside 0/1 for binary input) since reset(); give y_pred a score per class."
            )
        fraction = numerator / (denominator + (self.eps if self._average != "samples" else 0))
        if self._average == "weighted":
            return (fraction @ weight / (weight.sum() + self.eps)).item()
        if self._average in ("micro", "samples"):
            return fraction.item()
        if self._average == "macro":
            return fraction.mean().item()
        return fraction


def _one_hot(indices: torch.Tensor, classes: int) -> torch.Tensor:
    rows = torch.zeros(indices.shape[0], classes, dtype=torch.uint8, device=indices.device)
    return rows.scatter_(1, indices.unsqueeze(1), 1)


class Precision(PrecisionRecall):
    """Of the samples predicted as a class, the fraction that is of it (see `PrecisionRecall` for `average`)."""

    def update(self, output: Any) -> None:
        predicted, actual, correct = self._one_hot(output)
        self._accumulate(predicted, actual, correct)
