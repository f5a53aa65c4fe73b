"""Colossal-AI's gradient accumulation (a config's `gradient_accumulation = N`), as `initialize` applies it: the
engine's calls accumulate, the training loader is cut to whole windows, the LR scheduler steps once a window.

A script's own loop (and Colossal-AI's Trainer) calls `engine.zero_grad()`, `engine.backward(loss)` and
`engine.step()` for every batch; the engine counts its backward calls and lets only a window's first `zero_grad`
and its last `step` through (the step being `ModelEngine.step`: gradient handlers, clipping, the optimizer), each
batch's loss divided by `N` and, under DDP, the gradients' all-reduce kept for the window's last batch — what
Colossal-AI's `GradAccumOptimizer` does to the optimizer behind the engine. (tracktrain's own loops window by the
loop's iteration instead: `tracktrain.engine.training_step`; the Colossal Trainer runs them one batch per window
and leaves the counting to this engine, as Colossal-AI's Trainer does.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from tracktrain.engine.model_engine import BaseOpHook, ModelEngine
from tracktrain.engine.schedule import BaseSchedule

__all__ = ["Engine", "GradAccumDataloader", "GradAccumLrSchedulerByStep"]


class Engine(ModelEngine):
    """Colossal-AI's `colossalai.engine.Engine(model, optimizer, criterion, gradient_handlers, clip_grad_norm,
    ophook_list, verbose, schedule)`: tracktrain's `ModelEngine`, with `gradient_accumulation` batches adding up
    before each optimizer step (see the module). Other keyword arguments go to `ModelEngine` (`scaler`,
    `autocast_dtype`, ...)."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        criterion: Callable | None = None,
        gradient_handlers: Iterable[Any] | None = None,
        clip_grad_norm: float = 0.0,
        ophook_list: Iterable[BaseOpHook] | None = None,
        verbose: bool = True,
        schedule: BaseSchedule | None = None,
        *,
        gradient_accumulation: int = 1,
        **model_engine_options: Any,
    ) -> None:
        if (
            isinstance(gradient_accumulation, bool)
            or not isinstance(gradient_accumulation, int)
            or gradient_accumulation < 1
        ):
            raise ValueError(
                f"Engine(gradient_accumulation=...) must be a whole number >= 1, got {gradient_accumulation!r}."
            )
        super().__init__(
            model,
            optimizer,
            criterion,
            gradient_handlers,
            clip_grad_norm,
            ophook_list,
            schedule=schedule,
            **model_engine_options,
        )
        if gradient_accumulation > 1 and self.uses_pipeline:
            raise ValueError(
                "gradient_accumulation with parallel.pipeline is not supported here yet: a pipeline schedule "
                "backpropagates its micro-batches itself. Raise NUM_MICRO_BATCHES (and the batch size) instead."
            )
        self.verbose = verbose
        self.training = True
        self.accumulate_size = gradient_accumulation
        self._accumulated = 0  # backward calls since the window's optimizer step

    def zero_grad(self) -> None:
        """Zero the gradients where a window starts (every call without accumulation)."""
        if self._accumulated == 0:
            super().zero_grad()

    def backward(self, loss: torch.Tensor) -> None:
        """Backpropagate `loss` (divided by the window's size; under DDP the all-reduce waits for its last batch)."""
        if self.accumulate_size == 1:
            super().backward(loss)
            return
        self._accumulated += 1
        with self._no_sync():
            super().backward(loss / self.accumulate_size)

    def backward_by_grad(self, tensor: torch.Tensor, grad: torch.Tensor) -> None:
        """Backpropagate from `tensor` given its gradient (counted in the window like `backward`)."""
        if self.accumulate_size == 1:
            super().backward_by_grad(tensor, grad)
            return
        self._accumulated += 1
        with self._no_sync():
            super().backward_by_grad(tensor, grad)

    def step(self) -> None:
        """The optimizer step (gradient handlers, clipping, step) where a window ends; nothing before."""
        if self.accumulate_size > 1:
            if self._accumulated < self.accumulate_size:
                return
            self._accumulated = 0
        super().step()

    def train(self) -> None:
        self.training = True
        super().train()

    def eval(self) -> None:
        self.training = False
        super().eval()

    def _no_sync(self) -> contextlib.AbstractContextManager:
        model = self.model
        if self._accumulated < self.accumulate_size and isinstance(model, nn.parallel.DistributedDataParallel):
            return model.no_sync()
        return contextlib.nullcontext()


class GradAccumDataloader:
    """`dataloader` cut to whole accumulation windows: its first `len(dataloader) - len(dataloader) % size`
    batches (a loader that is not a torch DataLoader is read to its end, so that it starts over next time)."""

    def __init__(self, dataloader: Iterable[Any], accumulate_size: int) -> None:
        if not hasattr(dataloader, "__len__"):
            raise TypeError(
                f"gradient_accumulation cuts the training loader to whole windows, so it needs a loader with a length; "
                f"got {type(dataloader).__name__}."
            )
        self.dataloader = dataloader
        self.accumulate_size = accumulate_size
        length = len(dataloader)  # type: ignore[arg-type]
        self.steps_per_epoch = length - length % accumulate_size

    @property
    def dataset(self) -> Any:
        return getattr(self.dataloader, "dataset", None)

    @property
    def sampler(self) -> Any:
        return getattr(self.dataloader, "sampler", None)

    @property
    def batch_size(self) -> Any:
        return getattr(self.dataloader, "batch_size", None)

    def __len__(self) -> int:
        return self.steps_per_epoch

    def __iter__(self) -> Iterator[Any]:
        iterator = iter(self.dataloader)
        for _ in range(self.steps_per_epoch):
            yield next(iterator)
        if not isinstance(self.dataloader, DataLoader):
            for _ in iterator:  # a loader of another kind may only start over once read to its end
                pass


class GradAccumLrSchedulerByStep:
    """`lr_scheduler`, stepped once every `accumulate_size` calls of `step()` (one optimizer step each)."""

    def __init__(self, lr_scheduler: Any, accumulate_size: int) -> None:
        self.lr_scheduler = lr_scheduler
        self.accumulate_size = accumulate_size
        self.accumulate_step = 0

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.lr_scheduler.optimizer

    def step(self, *args: Any, **kwargs: Any) -> None:
        self.accumulate_step += 1
        if self.accumulate_step >= self.accumulate_size:
            self.accumulate_step = 0
            self.lr_scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> list[float]:
        return self.lr_scheduler.get_last_lr()

    def get_lr(self) -> list[float]:
        return self.lr_scheduler.get_lr()

    def state_dict(self) -> dict[str, Any]:
        return {"scheduler": self.lr_scheduler.state_dict(), "accumulate_step": self.accumulate_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.lr_scheduler.load_state_dict(state_dict["scheduler"])
        self.accumulate_step = state_dict["accumulate_step"]
