"""Recall (Ignite's `ignite.metrics.recall`): of the samples of a class, the fraction predicted as it."""

from __future__ import annotations

from typing import Any

from tracktrain.metrics.precision import PrecisionRecall

__all__ = ["Recall"]


class Recall(PrecisionRecall):
    """Of the samples of a class, the fraction predicted as it (see `PrecisionRecall` for `average`)."""

    def update(self, output: Any) -> None:
        _, actual, correct = self._one_hot(output)
        self._accumulate(actual, actual, correct)
