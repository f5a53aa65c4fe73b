"""The optimizers the Trainer hands a module: `ScaledOptimizer`, what `self.optimizers()` gives under fp16 manual
optimization (its `step` goes through the GradScaler), and `HookOptimizer`, what the `optimizer_step` and
`optimizer_zero_grad` hooks get under automatic optimization."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from tracktrain.engine.model_engine import ModelEngine

__all__ = ["HookOptimizer", "ScaledOptimizer"]


class ScaledOptimizer:
    """`optimizer` with `step()` through the ModelEngine's GradScaler: the gradients are unscaled (unless
    `clip_gradients` did it already) and the step is skipped when they hold inf/NaN. The scaler's scale is
    updated once per training batch, after all optimizers stepped. The wrapped optimizer is `.optimizer`.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, model_engine: ModelEngine) -> None:
        self.optimizer = optimizer
        self._model_engine = model_engine
        self.stepped = False  # since the scaler's last update

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    def step(self, closure: Callable[[], Any] | None = None) -> None:
        if closure is not None:
            raise ValueError("Under precision='16-mixed', step() takes no closure: call it after self.backward(loss).")
        self._model_engine.scaled_step(self.optimizer)
        self.stepped = True

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict)

    def __repr__(self) -> str:
        return f"ScaledOptimizer({self.optimizer!r})"


class HookOptimizer:
    """The optimizer `LoopModule.optimizer_step` receives (where Lightning gives its `LightningOptimizer`):
    `step(closure)` runs the closure (the batch: `train_step`, zeroing, backward), then `take_step` — the Trainer's
    step (gradient handlers, unscaling, clipping, the optimizer's own step, the scaler's update). Every other
    attribute (`param_groups`, `state`, `zero_grad`, ...) is the wrapped optimizer's, `.optimizer`."""

    def __init__(self, optimizer: torch.optim.Optimizer, take_step: Callable[[], None]) -> None:
        self.optimizer = optimizer
        self._take_step = take_step

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = closure() if closure is not None else None
        self._take_step()
        return loss

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)

    def __repr__(self) -> str:
        return f"HookOptimizer({self.optimizer!r})"
