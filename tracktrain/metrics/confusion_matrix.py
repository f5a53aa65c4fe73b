"""The confusion matrix and what is read from it (Ignite's `ignite.metrics.confusion_matrix`): `ConfusionMatrix`,
and as `MetricsLambda`s over one: `IoU` (= `JaccardIndex`), `mIoU`, `DiceCoefficient`, `cmAccuracy`, `cmPrecision`,
`cmRecall` (all in float64, with Ignite's 1e-15 guard against empty classes)."""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import torch

from tracktrain.metrics.distributed import all_reduce_sum
from tracktrain.metrics.inputs import identity, tensor_pair
from tracktrain.metrics.metric import Metric, MetricsLambda, NotComputableError

__all__ = [
    "ConfusionMatrix",
    "DiceCoefficient",
    "IoU",
    "JaccardIndex",
    "cmAccuracy",
    "cmPrecision",
    "cmRecall",
    "mIoU",
]

_GUARD = 1e-15


class ConfusionMatrix(Metric):
    """`matrix[i, j]`: how many samples of class i were predicted as class j, from `y_pred` (N, C, ...) scores and
    `y` (N, ...) class indices (each element a sample, e.g. each pixel of a segmentation); targets outside
    0..C-1 (an ignored label, 255) are left out.

    Args:
        num_classes: C, more than 1.
        average: None (counts, int64); "samples": divided by the number of examples (N, summed over batches);
            "recall": each row normalized; "precision": each column normalized.
        output_transform, device: see `Metric`. `skip_unrolling` is True by default, as in Ignite.
    """

    _state_dict_all_req_keys = ("confusion_matrix", "_num_examples")
    num_classes: int
    average: str | None
    confusion_matrix: torch.Tensor
    _num_examples: int

    def __init__(
        self,
        num_classes: int,
        average: str | None = None,
        output_transform: Callable[[Any], Any] = identity,
        device: str | torch.device | None = None,
        skip_unrolling: bool = True,
    ) -> None:
        if average is not None and average not in ("samples", "recall", "precision"):
            raise ValueError(f"Argument average can None or one of 'samples', 'recall', 'precision', got {average!r}.")
        if isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Integral) or num_classes <= 1:
            raise ValueError(f"Argument num_classes needs to be > 1, got {num_classes!r}.")
        self.num_classes = int(num_classes)
        self.average = average
        super().__init__(output_transform=output_transform, device=device, skip_unrolling=skip_unrolling)

    def reset(self) -> None:
        self._unsettle_device()
        self.confusion_matrix = torch.zeros(self.num_classes, self.num_classes, dtype=torch.int64, device=self._device)
        self._num_examples = 0

    def update(self, output: Any) -> None:
        y_pred, y = tensor_pair(output, "ConfusionMatrix")
        self._settle_device(y_pred.device)
        classes = self.num_classes
        if y_pred.ndim < 2:
            raise ValueError(
                f"y_pred must have shape (batch_size, num_classes (currently set to {classes}), ...), but given "
                f"{y_pred.shape}"
            )
        if y_pred.shape[1] != classes:
            raise ValueError(f"y_pred does not have correct number of classes: {y_pred.shape[1]} vs {classes}")
        if y.ndim + 1 != y_pred.ndim or tuple(y.shape) != (y_pred.shape[0], *y_pred.shape[2:]):
            raise ValueError(
                f"y_pred must have shape (batch_size, num_classes (currently set to {classes}), ...) and y must have "
                f"shape of (batch_size, ...), but given {y.shape} vs {y_pred.shape}."
            )
        self._num_examples += y_pred.shape[0]
        predicted = y_pred.argmax(dim=1).reshape(-1)
        actual = y.reshape(-1).long()
        kept = (actual >= 0) & (actual < classes)
        counts = torch.bincount(classes * actual[kept] + predicted[kept], minlength=classes**2)
        self.confusion_matrix += counts.reshape(classes, classes).to(self.confusion_matrix)

    def compute(self) -> torch.Tensor:
        matrix, examples = all_reduce_sum(self.confusion_matrix, self._num_examples)
        if examples == 0:
            raise NotComputableError(
                "Confusion matrix must have at least one example before it can be computed; call update() after "
                "reset()."
            )
        if self.average == "samples":
            return matrix.float() / examples
        if self.average is not None:
            return self.normalize(matrix.float(), self.average)
        return matrix

    @staticmethod
    def normalize(matrix: torch.Tensor, average: str) -> torch.Tensor:
        """Rows ("recall") or columns ("precision") of `matrix` normalized to sum to 1."""
        if average == "recall":
            return matrix / (matrix.sum(dim=1).unsqueeze(1) + _GUARD)
        if average == "precision":
            return matrix / (matrix.sum(dim=0) + _GUARD)
        raise ValueError(f"Argument average should be one of 'samples', 'recall', 'precision', got {average!r}.")


def _checked(cm: Any, ignore_index: int | None, what: str, counts_only: bool) -> ConfusionMatrix:
    if not isinstance(cm, ConfusionMatrix):
        raise TypeError(f"Argument cm should be instance of ConfusionMatrix, but given {type(cm)}")
    if counts_only and cm.average not in (None, "samples"):
        raise ValueError(
            f"ConfusionMatrix should have average attribute either None or 'samples' for {what}, got {cm.average!r}."
        )
    if ignore_index is not None and not (
        isinstance(ignore_index, numbers.Integral) and 0 <= ignore_index < cm.num_classes
    ):
        raise ValueError(
            f"ignore_index should be integer and in the range of [0, {cm.num_classes}), but given {ignore_index}"
        )
    return cm


def _without(values: torch.Tensor, ignore_index: int | None) -> torch.Tensor:
    if ignore_index is None:
        return values
    return torch.cat([values[:ignore_index], values[ignore_index + 1 :]])


def IoU(cm: ConfusionMatrix, ignore_index: int | None = None) -> MetricsLambda:  # noqa: N802 - Ignite's name
    """Intersection over union of each class, `diag / (row + column - diag)` (a tensor of C, or C - 1 without
    `ignore_index`)."""
    _checked(cm, ignore_index, "IoU", counts_only=True)

    def iou(matrix: torch.Tensor) -> torch.Tensor:
        matrix = matrix.double()
        diagonal = matrix.diag()
        return _without(diagonal / (matrix.sum(dim=1) + matrix.sum(dim=0) - diagonal + _GUARD), ignore_index)

    return MetricsLambda(iou, cm)


def JaccardIndex(cm: ConfusionMatrix, ignore_index: int | None = None) -> MetricsLambda:  # noqa: N802
    """The Jaccard index of each class: `IoU`."""
    return IoU(cm, ignore_index)


def mIoU(cm: ConfusionMatrix, ignore_index: int | None = None) -> MetricsLambda:  # noqa: N802 - Ignite's name
    """The mean of `IoU` over the classes (without `ignore_index`)."""
    return MetricsLambda(lambda values: values.mean(), IoU(cm, ignore_index))


def DiceCoefficient(cm: ConfusionMatrix, ignore_index: int | None = None) -> MetricsLambda:  # noqa: N802
    """The Dice coefficient of each class, `2 · diag / (row + column)`."""
    _checked(cm, ignore_index, "DiceCoefficient", counts_only=False)

    def dice(matrix: torch.Tensor) -> torch.Tensor:
        matrix = matrix.double()
        return _without(2.0 * matrix.diag() / (matrix.sum(dim=1) + matrix.sum(dim=0) + _GUARD), ignore_index)

    return MetricsLambda(dice, cm)


def cmAccuracy(cm: ConfusionMatrix) -> MetricsLambda:  # noqa: N802 - Ignite's name
    """The fraction of samples on the diagonal."""
    return MetricsLambda(lambda m: m.double().diag().sum() / (m.double().sum() + _GUARD), cm)


def cmPrecision(cm: ConfusionMatrix, average: bool = True) -> MetricsLambda:  # noqa: N802 - Ignite's name
    """The precision of each class (`diag / column`), or their mean."""
    precision = MetricsLambda(lambda m: m.double().diag() / (m.double().sum(dim=0) + _GUARD), cm)
    return MetricsLambda(lambda values: values.mean(), precision) if average else precision


def cmRecall(cm: ConfusionMatrix, average: bool = True) -> MetricsLambda:  # noqa: N802 - Ignite's name
    """The recall of each class (`diag / row`), or their mean."""
    recall = MetricsLambda(lambda m: m.double().diag() / (m.double().sum(dim=1) + _GUARD), cm)
    return MetricsLambda(lambda values: values.mean(), recall) if average else recall
