"""Schedules: how one batch goes through the model (Colossal-AI's `schedule` seam).

A schedule runs forward, loss and backward for one batch on a `ModelEngine`; what surrounds it — zeroing,
accumulation windows, the optimizer step — is `TrainingStep`'s. `NonPipelineSchedule` sends the whole batch
through the whole model at once; pipeline schedules (micro-batches over stages on several ranks) implement
the same two methods and say `uses_pipeline = True`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch
from torch import nn

from tracktrain.engine.batches import split_batch

__all__ = ["BaseSchedule", "NonPipelineSchedule", "ScheduledEngine"]


class ScheduledEngine(Protocol):
    """What a schedule needs of the engine it runs a batch on: a `ModelEngine`, which holds its schedule and so
    imports this module (not the reverse)."""

    @property
    def model(self) -> nn.Module: ...

    @property
    def criterion(self) -> Callable | None: ...

    @property
    def autocast_dtype(self) -> torch.dtype | None: ...

    @property
    def param_dtype(self) -> torch.dtype | None: ...

    def autocast(self) -> contextlib.AbstractContextManager: ...

    def backward(self, loss: torch.Tensor) -> None: ...


class BaseSchedule(Protocol):
    """What a `ModelEngine` and a `TrainingStep` need of a schedule."""

    uses_pipeline: bool

    def forward_backward(
        self,
        model_engine: ScheduledEngine,
        forward: Callable[[], Any],
        loss_of: Callable[[Any], torch.Tensor | None],
        loss_divisor: int = 1,
        accept_loss: Callable[[torch.Tensor], bool] | None = None,
    ) -> tuple[Any, bool]: ...

    def forward_backward_step(
        self,
        model_engine: ScheduledEngine,
        data_iter: Iterator[Any],
        forward_only: bool = False,
        return_loss: bool = True,
        return_output_label: bool = True,
    ) -> tuple[Any, Any, torch.Tensor | None]: ...

    def gradient_norm(self, gradients: list[torch.Tensor]) -> torch.Tensor:
        """The total norm of the model's gradients, of which this process holds `gradients` (for clipping)."""
        ...


class NonPipelineSchedule:
    """The whole batch through the whole model: forward (and loss) under the engine's autocast, then backward."""

    uses_pipeline = False

    def forward_backward(
        self,
        model_engine: ScheduledEngine,
        forward: Callable[[], Any],
        loss_of: Callable[[Any], torch.Tensor | None],
        loss_divisor: int = 1,
        accept_loss: Callable[[torch.Tensor], bool] | None = None,
    ) -> tuple[Any, bool]:
        """Run `forward()` (which computes the loss too) under autocast, then backpropagate `loss_of(output)`
        divided by `loss_divisor` (the batches of an accumulation window: their gradients add up to one step on
        their concatenation), unless it is None (the batch is skipped) or `accept_loss` refuses it. Returns `(output, backpropagated)`."""
        if model_engine.autocast_dtype is None and model_engine.param_dtype is None:  # no precision region to enter
            output = forward()
        else:
            with model_engine.autocast():
                output = forward()
        loss = loss_of(output)
        if loss is None or (accept_loss is not None and not accept_loss(loss)):  # None: the step skips this batch
            return output, False
        model_engine.backward(loss / loss_divisor if loss_divisor > 1 else loss)
        return output, True

    def forward_backward_step(
        self,
        model_engine: ScheduledEngine,
        data_iter: Iterator[Any],
        forward_only: bool = False,
        return_loss: bool = True,
        return_output_label: bool = True,
    ) -> tuple[Any, Any, torch.Tensor | None]:
        """Colossal-AI's `execute_schedule`: the next `(inputs, label)` batch of `data_iter` through the model and
        the engine's criterion, backward unless `forward_only`; returns `(output, label, loss)` (output and label
        None unless `return_output_label`, loss None when neither needed nor asked for)."""
        inputs, label = split_batch(
            next(data_iter),
            "execute_schedule",
            "Split other layouts yourself and call model_engine(inputs) and model_engine.criterion(output, label).",
        )
        needs_loss = return_loss or not forward_only
        criterion = model_engine.criterion if needs_loss else None
        if needs_loss and criterion is None:
            raise ValueError("execute_schedule needs a criterion to compute the loss; pass criterion= to ModelEngine.")

        def forward() -> tuple[Any, torch.Tensor | None]:
            output = model_engine.model(inputs)
            return output, (criterion(output, label) if criterion is not None else None)

        if forward_only:
            with model_engine.autocast():
                output, loss = forward()
        else:
            (output, loss), _ = self.forward_backward(model_engine, forward, loss_of=_second)
        if not return_output_label:
            return None, None, loss
        return output, label, loss

    def gradient_norm(self, gradients: list[torch.Tensor]) -> torch.Tensor:
        """The norm of `gradients`: the whole model's here (sharded ones as DTensors know theirs)."""
        return torch.nn.utils.get_total_norm(gradients)


def _second(pair: tuple[Any, Any]) -> Any:
    return pair[1]
