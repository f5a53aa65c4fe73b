"""`BasePredictionWriter`, Lightning's: write predictions as they come (`write_interval="batch"`), at the end of the
pass (`"epoch"`) or both, in the methods a subclass defines."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracktrain.callbacks.base import Callback

if TYPE_CHECKING:
    from tracktrain.trainer.module import LoopModule
    from tracktrain.trainer.surface import TrainerSurface

__all__ = ["BasePredictionWriter"]

_INTERVALS = ("batch", "epoch", "batch_and_epoch")


class BasePredictionWriter(Callback):
    """Subclass it and define `write_on_batch_end(trainer, module, prediction, batch_indices, batch, batch_idx,
    dataloader_idx)` and/or `write_on_epoch_end(trainer, module, predictions, batch_indices)`, called during
    `trainer.predict(...)` as Lightning calls them. `batch_indices` are None (the samples a batch holds are the
    loader's business here)."""

    def __init__(self, write_interval: str = "batch") -> None:
        if write_interval not in _INTERVALS:
            raise ValueError(
                f"BasePredictionWriter(write_interval=...) must be one of {_INTERVALS}, got {write_interval!r}."
            )
        self.interval = write_interval
        self._predictions: list[Any] = []

    def write_on_batch_end(
        self,
        trainer: TrainerSurface,
        module: LoopModule,
        prediction: Any,
        batch_indices: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int,
    ) -> None:
        raise NotImplementedError(
            f"{type(self).__name__}(write_interval={self.interval!r}) must define write_on_batch_end."
        )

    def write_on_epoch_end(
        self, trainer: TrainerSurface, module: LoopModule, predictions: Any, batch_indices: Any
    ) -> None:
        raise NotImplementedError(
            f"{type(self).__name__}(write_interval={self.interval!r}) must define write_on_epoch_end."
        )

    def on_predict_epoch_start(self, trainer: TrainerSurface, module: LoopModule) -> None:
        self._predictions = []

    def on_predict_batch_end(
        self,
        trainer: TrainerSurface,
        module: LoopModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if self.interval != "epoch":
            self.write_on_batch_end(trainer, module, outputs, None, batch, batch_idx, dataloader_idx)
        if self.interval != "batch":
            self._predictions.append(outputs)

    def on_predict_epoch_end(self, trainer: TrainerSurface, module: LoopModule) -> None:
        if self.interval != "batch":
            predictions, self._predictions = self._predictions, []
            self.write_on_epoch_end(trainer, module, predictions, [None] * len(predictions))
