"""The Trainer's evaluation stages — validate, test, predict — each one pass of its engine over a loader, with
no gradients and the module in eval mode."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from tracktrain.engine.batches import move_to_device
from tracktrain.engine.engine import Engine
from tracktrain.trainer.batches import epoch_length_of
from tracktrain.trainer.hooks import batch_index

if TYPE_CHECKING:
    from tracktrain.trainer.trainer import Trainer

__all__ = ["EvaluationStages"]

_LIMIT_NAMES = {"fit": "train", "validate": "val", "test": "test", "predict": "predict"}


class EvaluationStages:
    """The process functions of the evaluation engines, and one pass of a stage (`run`)."""

    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer
        self.predictions: list[Any] = []

    def run(self, stage: str, loader: Any, max_batches: int | None = None) -> dict[str, Any]:
        """Run the engine of `stage` once over `loader` (at most `max_batches` of it); returns the epoch's values."""
        trainer = self._trainer
        module, outer_log = trainer.running_module, trainer.metric_log
        training = module.training
        loader = trainer.loader_for(loader, shuffle_default=False)
        epoch_length = epoch_length_of(f"limit_{_LIMIT_NAMES[stage]}_batches", loader, trainer.limits[stage])
        if max_batches is not None:
            epoch_length = max_batches if epoch_length is None else min(epoch_length, max_batches)
        if epoch_length == 0:
            return {}
        module.eval()
        try:
            with torch.no_grad():
                trainer.engines[stage].run(loader, max_epochs=1, epoch_length=epoch_length)
        finally:
            module.train(training)
            trainer.metrics.leave_stage(outer_log)
        return trainer.metrics.take_epoch_values(stage)

    def evaluate_batch(self, engine: Engine, batch: Any) -> Any:
        trainer = self._trainer
        batch = self._to_device(batch)
        log = trainer.metric_log
        log.batch = batch
        module = trainer.running_module
        step = trainer.strategy.evaluation_forward(module.test_step if log.stage == "test" else module.eval_step)
        with trainer.running_model_engine.autocast():
            return step(batch, batch_index(engine))

    def predict_batch(self, engine: Engine, batch: Any) -> Any:
        trainer = self._trainer
        batch = self._to_device(batch)
        step = trainer.strategy.evaluation_forward(trainer.running_module.predict_step)
        with torch.no_grad(), trainer.running_model_engine.autocast():
            return step(batch, batch_index(engine))

    def keep_prediction(self, engine: Engine) -> None:
        self.predictions.append(engine.state.output)

    def _to_device(self, batch: Any) -> Any:
        device = self._trainer.device
        return batch if device.type == "cpu" else move_to_device(batch, device)  # CPU: no walk over the batch
