"""Building what a fit runs: the module to train, its optimizers, and the ModelEngine that runs its steps."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from tracktrain.engine.model_engine import ModelEngine
from tracktrain.trainer.module import LoopModule
from tracktrain.trainer.optimizers import parse_optimizers
from tracktrain.trainer.supervised_module import SupervisedModule

if TYPE_CHECKING:
    from tracktrain.trainer.strategies.base import Strategy

__all__ = ["as_loop_module", "configure_optimizers", "model_engine_for"]


def as_loop_module(module: Any, optimizer: Any, criterion: Any, lr_scheduler: Any) -> LoopModule:
    """What `Trainer.fit` trains: a LoopModule as given, a plain model or a ModelEngine as a SupervisedModule."""
    if isinstance(module, LoopModule):
        if optimizer is not None or criterion is not None or lr_scheduler is not None:
            raise ValueError(
                "fit(optimizer=, criterion=, lr_scheduler=) are for plain models; a LoopModule returns its "
                "optimizers from configure_optimizers()."
            )
        return module
    if isinstance(module, (nn.Module, ModelEngine)):
        return SupervisedModule(module, optimizer, criterion, lr_scheduler)
    raise TypeError(
        f"Trainer.fit(model=...) needs a LoopModule, an nn.Module (with optimizer= and criterion=) or a ModelEngine; got "
        f"{type(module).__name__}."
    )


def configure_optimizers(module: LoopModule) -> tuple[list, list]:
    """The module's optimizers and scheduler configurations, checked against its optimization mode."""
    optimizers, schedulers = parse_optimizers(module.configure_optimizers())
    if module.automatic_optimization and len(optimizers) > 1:
        raise ValueError(
            f"configure_optimizers returned {len(optimizers)} optimizers, but automatic optimization steps one. "
            "Set automatic_optimization = False in your LoopModule and step them in train_step "
            "(self.optimizers(), self.backward(loss), optimizer.step())."
        )
    return optimizers, schedulers


def model_engine_for(
    module: LoopModule,
    optimizers: list[torch.optim.Optimizer],
    strategy: Strategy,
    device: torch.device,
    *,
    autocast_dtype: torch.dtype | None,
    param_dtype: torch.dtype | None,
    gradient_clip_val: float | None,
    gradient_clip_algorithm: str,
) -> ModelEngine:
    """The ModelEngine that runs `module`'s steps with its `optimizers` under the strategy, on `device`, with the
    Trainer's precision (`autocast_dtype`, `param_dtype`) and clipping."""
    if not module.automatic_optimization:
        if gradient_clip_val is not None:
            raise ValueError(
                f"Trainer(gradient_clip_val={gradient_clip_val}) applies to automatic optimization; under "
                "manual optimization call self.clip_gradients(optimizer, gradient_clip_val=...) in train_step."
            )
        return ModelEngine(
            module,
            autocast_dtype=autocast_dtype,
            param_dtype=param_dtype,
            device_type=device.type,
            scaler=_grad_scaler(device, autocast_dtype),
            **strategy.model_engine_options(None),
        )
    given = getattr(module, "model_engine", None)
    if isinstance(module, SupervisedModule) and given is not None:
        if gradient_clip_val is not None:
            raise ValueError(
                f"Trainer(gradient_clip_val={gradient_clip_val}) with a ModelEngine from initialize(): clip "
                "in the engine instead, initialize(..., clip_grad_norm=...), so the engine stays as you built it."
            )
        return given
    return ModelEngine(
        module,
        optimizers[0],
        clip_grad_norm=gradient_clip_val if gradient_clip_algorithm == "norm" else None,
        clip_grad_value=gradient_clip_val if gradient_clip_algorithm == "value" else None,
        scaler=_grad_scaler(device, autocast_dtype),
        autocast_dtype=autocast_dtype,
        param_dtype=param_dtype,
        device_type=device.type,
        **strategy.model_engine_options(optimizers[0]),
    )


def _grad_scaler(device: torch.device, autocast_dtype: torch.dtype | None) -> torch.amp.GradScaler | None:
    return torch.amp.GradScaler(device.type) if autocast_dtype == torch.float16 else None
