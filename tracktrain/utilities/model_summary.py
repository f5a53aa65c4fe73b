"""Lightning's `utilities.model_summary`: `ModelSummary(model, max_depth)` prints the table tracktrain's model summary
callback logs (`summarize`), with the layers' input and output sizes when the module has an `example_input_array`."""

from __future__ import annotations

from torch import nn

from tracktrain.callbacks.model_summary import ModelSummaryTable, summarize

__all__ = ["ModelSummary", "summarize"]


class ModelSummary:
    def __init__(self, model: nn.Module, max_depth: int = 1) -> None:
        self._table: ModelSummaryTable = summarize(model, max_depth, getattr(model, "example_input_array", None))

    @property
    def total_parameters(self) -> int:
        return self._table.total_parameters

    @property
    def trainable_parameters(self) -> int:
        return self._table.trainable_parameters

    def __str__(self) -> str:
        return str(self._table)

    __repr__ = __str__
