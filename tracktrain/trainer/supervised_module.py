"""`SupervisedModule`: a plain model, optimizer and loss function as a `LoopModule`, for `Trainer.fit(model, ...)`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from tracktrain.engine.batches import split_batch
from tracktrain.engine.model_engine import ModelEngine
from tracktrain.trainer.module import LoopModule

__all__ = ["SupervisedModule"]


class SupervisedModule(LoopModule):
    """Trains `model` on `(inputs, targets)` batches with `criterion`; logs `train_loss`, `val_loss`, `test_loss`.

    Built from a model, an optimizer and a criterion (and optionally an LR scheduler), or from a `ModelEngine`
    (`tracktrain.initialize(...)`), whose gradient handlers, clipping, ophooks and precision are then the ones
    the Trainer uses.
    """

    def __init__(
        self,
        model: nn.Module | ModelEngine,
        optimizer: torch.optim.Optimizer | None = None,
        criterion: Callable | None = None,
        lr_scheduler: Any = None,
    ) -> None:
        super().__init__()
        model_engine = model if isinstance(model, ModelEngine) else None
        if model_engine is not None:
            if optimizer is not None and optimizer is not model_engine.optimizer:
                raise ValueError("Pass the optimizer either inside the ModelEngine or as optimizer=, not both.")
            model, optimizer = model_engine.model, model_engine.optimizer
            criterion = criterion if criterion is not None else model_engine.criterion
        if not isinstance(model, nn.Module):
            raise TypeError(f"SupervisedModule needs a torch.nn.Module or a ModelEngine, got {type(model).__name__}.")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"Training a plain model needs an optimizer: fit(model, loader, optimizer=torch.optim.SGD(...), "
                f"criterion=nn.CrossEntropyLoss()); got optimizer={optimizer!r}."
            )
        if not callable(criterion):
            raise TypeError(
                f"Training a plain model needs a loss function: fit(model, loader, optimizer=..., "
                f"criterion=nn.CrossEntropyLoss()); got criterion={criterion!r}."
            )
        self.model = model
        self.criterion = criterion
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.model_engine = model_engine

    def forward(self, inputs: Any) -> Any:
        return self.model(inputs)

    def train_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = _split(batch)
        loss = self.criterion(self.model(inputs), targets)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def eval_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        inputs, targets = _split(batch)
        output = self.model(inputs)
        self.log("val_loss", self.criterion(output, targets), prog_bar=True)
        return {"output": output, "target": targets}

    def test_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        inputs, targets = _split(batch)
        output = self.model(inputs)
        self.log("test_loss", self.criterion(output, targets))
        return {"output": output, "target": targets}

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        inputs = _split(batch)[0] if isinstance(batch, (tuple, list)) else batch
        return self.model(inputs)

    def configure_optimizers(self) -> Any:
        if self.lr_scheduler is None:
            return self.optimizer
        return {"optimizer": self.optimizer, "lr_scheduler": self.lr_scheduler}


def _split(batch: Any) -> tuple[Any, Any]:
    return split_batch(batch, "A plain model trained by the Trainer", "Write a LoopModule for other batch layouts.")
