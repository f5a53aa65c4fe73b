"""Accuracy (binary, multiclass, multilabel) and top-k categorical accuracy, as in PyTorch-Ignite.

The kind of input is decided from shapes alone, so `update()` reads nothing back from the device:

- multiclass: `y_pred` (N, C, ...) scores with C > 1, `y` (N, ...) class indices;
- binary: `y_pred` and `y` of the same shape (N, ...), or `y_pred` (N, 1, ...) and `y` (N, ...), holding 0/1;
- multilabel (`is_multilabel=True`): `y_pred` and `y` both (N, C, ...) with C > 1, holding 0/1; a sample counts
  as correct when all its C labels are.

Ignite checks that binary/multilabel inputs hold only 0 and 1 in every update, which reads a value back to the
host each batch. Here the check runs on the device: each update adds to a counter of batches with other values,
and `compute()` (which syncs anyway) raises if it is not zero. The error comes at the end of the epoch instead of
at the offending batch; in exchange updates never wait for the device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from tracktrain.checks.numeric import is_integral
from tracktrain.metrics.distributed import all_reduce_sum
from tracktrain.metrics.inputs import identity, tensor_pair
from tracktrain.metrics.metric import Metric, NotComputableError

__all__ = ["Accuracy", "ClassificationMetric", "TopKCategoricalAccuracy"]

_MULTILABEL_SHAPES = (
    "y and y_pred must have same shape of (batch_size, num_categories, ...) and num_categories > 1: multilabel "
    "inputs hold 0/1."
)
_EXPECTED_SHAPES = (
    "expected y_pred (N, C, ...) class scores with y (N, ...) class indices (multiclass), or y_pred and y of "
    "the same shape holding 0/1 (binary; multilabel (N, C, ...) with is_multilabel=True)"
)


def _shapes(y_pred: torch.Tensor, y: torch.Tensor) -> str:
    return f"y_pred of shape {tuple(y_pred.shape)} and y of shape {tuple(y.shape)}"


def _has_values_other_than_0_and_1(t: torch.Tensor) -> torch.Tensor:
    """A 0-dim bool tensor on `t`'s device; nothing is read back to the host."""
    return ((t != 0) & (t != 1)).any()


class ClassificationMetric(Metric):
    """The base of the metrics of class predictions (Accuracy, Precision, Recall): which kind of input a batch is,
    from shapes alone (see the module docstring), fixed by the first `update()` after `reset()`, and the on-device
    count of binary or multilabel batches holding values other than 0 and 1, checked by `compute()`.

    Subclasses call `_check_kind(y_pred, y)` in `update()`, which also counts those batches, and `_raise_if_not_binary()`
    in `compute()` with the counts reduced over ranks.
    """

    _num_classes: int | None
    _kind: str | None
    _non_binary_y_pred: torch.Tensor
    _non_binary_y: torch.Tensor

    def __init__(
        self,
        output_transform: Callable[[Any], Any] = identity,
        is_multilabel: bool = False,
        device: str | torch.device | None = None,
        skip_unrolling: bool = False,
    ) -> None:
        self._is_multilabel = is_multilabel
        super().__init__(output_transform=output_transform, device=device, skip_unrolling=skip_unrolling)

    def _reset_kind(self) -> None:
        # updates whose y_pred / y held values other than 0 and 1 in a binary or multilabel setting
        self._non_binary_y_pred = torch.zeros((), dtype=torch.int64, device=self._device)
        self._non_binary_y = torch.zeros((), dtype=torch.int64, device=self._device)
        self._kind = None
        self._num_classes = None

    def _check_kind(self, y_pred: torch.Tensor, y: torch.Tensor) -> str:
        """The kind of this batch, from shapes only; raises on shapes that fit no kind or change the kind. Binary
        and multilabel batches' values are counted on the device (nothing is read back)."""
        name = type(self).__name__
        if y_pred.ndim == y.ndim + 1 and y_pred.ndim >= 2:
            expected_y = (y_pred.shape[0], *y_pred.shape[2:])
            if tuple(y.shape) != expected_y:
                raise ValueError(
                    f"y and y_pred must have compatible shapes. {name} got {_shapes(y_pred, y)}: for class scores "
                    f"y_pred (N, C, ...) y must hold class indices of shape (N, ...) = {expected_y}."
                )
            num_classes = y_pred.shape[1]
            kind = "binary" if num_classes == 1 else "multiclass"
            if self._is_multilabel:
                raise ValueError(f"{_MULTILABEL_SHAPES} {name}(is_multilabel=True) got {_shapes(y_pred, y)}.")
        elif y_pred.ndim == y.ndim and y_pred.ndim >= 1:
            if y_pred.shape != y.shape:
                raise ValueError(
                    f"y and y_pred must have compatible shapes. {name} got {_shapes(y_pred, y)}: {_EXPECTED_SHAPES}."
                )
            if self._is_multilabel:
                if y.ndim < 2 or y.shape[1] < 2:
                    raise ValueError(f"{_MULTILABEL_SHAPES} {name}(is_multilabel=True) got {_shapes(y_pred, y)}.")
                kind, num_classes = "multilabel", y.shape[1]
            else:
                kind, num_classes = "binary", 1
        else:
            raise ValueError(
                "y must have shape of (batch_size, ...) and y_pred must have shape of (batch_size, num_categories, "
                f"...) or (batch_size, ...), but given {y.shape} vs {y_pred.shape}. {name} got {_shapes(y_pred, y)}: "
                f"{_EXPECTED_SHAPES}."
            )

        if self._kind is None:
            self._kind, self._num_classes = kind, num_classes
        elif kind != self._kind:
            raise RuntimeError(
                f"Input data type has changed from {self._kind} to {kind}. {name} got {_shapes(y_pred, y)}; the "
                f"kind is fixed by the first update() after reset(). Use one {name} per kind of input."
            )
        elif num_classes != self._num_classes:
            raise ValueError(
                f"Input data number of classes has changed from {self._num_classes} to {num_classes}. {name} got "
                f"{_shapes(y_pred, y)}; every batch must have the same number of classes."
            )
        if kind != "multiclass":
            self._non_binary_y_pred += _has_values_other_than_0_and_1(y_pred).to(self._device)
            self._non_binary_y += _has_values_other_than_0_and_1(y).to(self._device)
        return kind

    def _raise_if_not_binary(self, non_binary_y_pred: int, non_binary_y: int) -> None:
        """Refuse binary/multilabel inputs that held other values than 0 and 1 (counts of offending updates)."""
        for name, count in (("y_pred", non_binary_y_pred), ("y", non_binary_y)):
            if count:
                raise ValueError(
                    f"For binary cases, {name} must be comprised of 0's and 1's. {type(self).__name__} got "
                    f"{self._kind} inputs whose {name} held other values in {count} update(s) since reset(): "
                    "threshold scores first, e.g. output_transform=lambda out: ((out[0] > 0.5).long(), out[1]); for "
                    "multiclass pass y_pred as (N, C) scores and y as (N,) class indices."
                )


class Accuracy(ClassificationMetric):
    """Fraction of correctly predicted samples (binary, multiclass or multilabel; see the module docstring).

    Args:
        output_transform: turns the engine output into `(y_pred, y)`.
        is_multilabel: `y_pred` and `y` are (N, C, ...) 0/1 labels; a sample is correct when all C labels match.
        device: where the counts accumulate (default: the device of the inputs; see `Metric`).
        skip_unrolling: see `Metric`.

    The kind of input (binary/multiclass/multilabel) and the number of classes are fixed by the first `update()`
    after `reset()`; a later batch of another kind is an error. `compute()` returns a float.
    """

    _state_dict_all_req_keys = (
        "_num_correct",
        "_num_examples",
        "_non_binary_y_pred",
        "_non_binary_y",
        "_kind",
        "_num_classes",
    )
    _num_correct: torch.Tensor
    _num_examples: int

    def reset(self) -> None:
        self._unsettle_device()
        self._num_correct = torch.zeros((), dtype=torch.int64, device=self._device)
        self._num_examples = 0
        self._reset_kind()

    def update(self, output: Any) -> None:
        y_pred, y = tensor_pair(output, "Accuracy")
        self._settle_device(y_pred.device)
        kind = self._check_kind(y_pred, y)
        if kind == "multiclass":
            correct = torch.argmax(y_pred, dim=1) == y
        elif kind == "binary":
            correct = y_pred.reshape(-1).to(y.dtype) == y.reshape(-1)
        else:  # multilabel: (N, C, ...) -> (N, ...), a sample is right when all its labels are
            correct = (y_pred.to(y.dtype) == y).all(dim=1)
        self._num_correct += correct.sum().to(self._device)
        self._num_examples += correct.numel()

    def compute(self) -> float:
        correct, examples, non_binary_y_pred, non_binary_y = all_reduce_sum(
            self._num_correct, self._num_examples, self._non_binary_y_pred, self._non_binary_y
        )
        if examples == 0:
            raise NotComputableError(
                "Accuracy must have at least one example before it can be computed; call update() after reset()."
            )
        # the one host sync of compute()
        correct, non_binary_y_pred, non_binary_y = torch.stack([correct, non_binary_y_pred, non_binary_y]).tolist()
        self._raise_if_not_binary(non_binary_y_pred, non_binary_y)
        return correct / examples


class TopKCategoricalAccuracy(Metric):
    """Fraction of samples whose true class is among the `k` highest scores of `y_pred` (N, C); `y` is (N,)."""

    _state_dict_all_req_keys = ("_num_correct", "_num_examples")
    _num_correct: torch.Tensor
    _num_examples: int

    def __init__(
        self,
        k: int = 5,
        output_transform: Callable[[Any], Any] = identity,
        device: str | torch.device | None = None,
        skip_unrolling: bool = False,
    ) -> None:
        if not (is_integral(k) and not isinstance(k, bool) and k > 0):
            raise ValueError(f"TopKCategoricalAccuracy: k must be a positive integer, got {k!r}.")
        self._k = int(k)
        super().__init__(output_transform=output_transform, device=device, skip_unrolling=skip_unrolling)

    def reset(self) -> None:
        self._unsettle_device()
        self._num_correct = torch.zeros((), dtype=torch.int64, device=self._device)
        self._num_examples = 0

    def update(self, output: Any) -> None:
        y_pred, y = tensor_pair(output, "TopKCategoricalAccuracy")
        self._settle_device(y_pred.device)
        if y_pred.ndim != 2 or y.ndim not in (1, 2) or y.shape[0] != y_pred.shape[0] or y.numel() != y.shape[0]:
            raise ValueError(
                f"TopKCategoricalAccuracy got {_shapes(y_pred, y)}: expected y_pred (N, C) class scores and y (N,) "
                "class indices."
            )
        if y_pred.shape[1] < self._k:
            raise ValueError(
                f"TopKCategoricalAccuracy(k={self._k}) got y_pred of shape {tuple(y_pred.shape)} with only "
                f"{y_pred.shape[1]} classes; k must be at most the number of classes."
            )
        top_k = torch.topk(y_pred, self._k, dim=1).indices
        correct = (top_k == y.reshape(-1, 1)).any(dim=1)
        self._num_correct += correct.sum().to(self._device)
        self._num_examples += correct.shape[0]

    def compute(self) -> float:
        correct, examples = all_reduce_sum(self._num_correct, self._num_examples)
        if examples == 0:
            raise NotComputableError(
                "TopKCategoricalAccuracy must have at least one example before it can be "
                "computed; call update() after reset()."
            )
        return correct.item() / examples  # host sync, once per compute()
