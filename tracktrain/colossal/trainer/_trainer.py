"""Colossal-AI's `Trainer(engine, timer, logger)` with `fit(train_dataloader, epochs, ...)`, on tracktrain's Trainer."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tracktrain.callbacks.base import Callback
from tracktrain.colossal.trainer.hooks import in_priority_order
from tracktrain.distributed.logger import DistributedLogger
from tracktrain.engine.model_engine import ModelEngine
from tracktrain.handlers.multi_timer import MultiTimer
from tracktrain.trainer.supervised_module import SupervisedModule
from tracktrain.trainer.trainer import Trainer as LoopTrainer

__all__ = ["Trainer"]


class Trainer:
    """Trains the `ModelEngine` from `initialize(...)` on `(inputs, labels)` batches; hooks are callbacks.

    Args:
        engine: the model engine (model, optimizer, criterion, gradient handlers, clipping, ophooks).
        timer: the `MultiTimer` the timing hook reports from (pass the same one to `LogTimingByEpochHook`).
        logger: the `DistributedLogger` for the run's messages.
    """

    def __init__(
        self, engine: ModelEngine, timer: MultiTimer | None = None, logger: DistributedLogger | None = None
    ) -> None:
        if not isinstance(engine, ModelEngine):
            raise TypeError(
                f"Trainer(engine=...) takes the ModelEngine from tracktrain.colossal.initialize(...), got "
                f"{type(engine).__name__}."
            )
        self.engine = engine
        self.timer = timer
        self.logger = logger
        self.module = SupervisedModule(engine)
        self.trainer: LoopTrainer | None = None

    @property
    def states(self) -> dict[str, Any]:
        """The run's progress and latest values (Colossal-AI's `trainer.states`)."""
        trainer = self.trainer
        if trainer is None:
            return {"epoch": 0, "step": 0, "metrics": {}}
        return {"epoch": trainer.current_epoch, "step": trainer.global_step, "metrics": trainer.callback_metrics}

    def fit(
        self,
        train_dataloader: Iterable[Any],
        epochs: int,
        max_steps: int | None = None,
        test_dataloader: Iterable[Any] | None = None,
        test_interval: int = 1,
        hooks: Sequence[Callback] | None = None,
        display_progress: bool = False,
        return_output_label: bool = True,
    ) -> None:
        """Train for `epochs` (or `max_steps` optimizer steps), evaluating on `test_dataloader` every
        `test_interval` epochs; `hooks` run as callbacks; `display_progress` shows a bar on a terminal."""
        self.trainer = LoopTrainer(
            max_epochs=epochs,
            max_steps=max_steps,
            val_every_n_epochs=test_interval,
            callbacks=in_priority_order(hooks or ()),
            enable_progress_bar=display_progress,
            enable_checkpointing=False,
        )
        self.trainer.fit(self.module, train_dataloader, test_dataloader)
        if self.logger is not None:
            self.logger.info(
                f"Training finished: {self.trainer.global_step} steps, {self.trainer.current_epoch} epochs."
            )

    def evaluate(
        self,
        test_dataloader: Iterable[Any],
        hooks: Sequence[Callback] | None = None,
        display_progress: bool = False,
        return_loss: bool = True,
        return_output_label: bool = True,
    ) -> dict[str, float]:
        """Evaluate on `test_dataloader`; returns the evaluation's values (`val_loss`, and what the hooks add)."""
        trainer = LoopTrainer(
            callbacks=in_priority_order(hooks or ()), enable_progress_bar=display_progress, enable_checkpointing=False
        )
        (values,) = trainer.validate(self.module, test_dataloader)
        return values
