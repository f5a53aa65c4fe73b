"""Supervised training and evaluation steps, and engines built from them.

The training steps are the one `TrainingStep` (with Ignite's accumulation windows, counted over the run's
iterations) on a `ModelEngine`; there is one evaluation step (`_evaluation_step`). Precision and device are
small parameters of them: an autocast dtype, an optional GradScaler, and how the optimizer steps
(`optimizer.step()` or torch_xla's `optimizer_step`). The public factories only choose those parameters.

By default the training step returns `loss.detach()`, a tensor: nothing in the step waits for the device.
Ignite returns `loss.item()`; pass `output_transform=lambda x, y, y_pred, loss: loss.item()` to get that.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from tracktrain.checks.numeric import is_integral, is_real
from tracktrain.distributed.xla import mark_step, xla_model
from tracktrain.engine.batches import convert_tensor, split_batch
from tracktrain.engine.engine import Engine
from tracktrain.engine.model_engine import ModelEngine
from tracktrain.engine.training_step import IterationWindows, TrainingStep

__all__ = [
    "convert_tensor",
    "supervised_evaluation_step",
    "supervised_evaluation_step_amp",
    "supervised_training_step",
    "supervised_training_step_amp",
    "supervised_training_step_apex",
    "supervised_training_step_tpu",
]

Device = str | torch.device | None

APEX_MESSAGE = (
    "NVIDIA apex is not supported: native PyTorch AMP replaces it. Use amp_mode='amp' (torch.autocast plus "
    "torch.amp.GradScaler via scaler=True) or supervised_training_step_amp."
)


def default_prepare_batch(batch: Sequence[Any], device: Device = None, non_blocking: bool = False) -> tuple[Any, Any]:
    """Split a `(x, y)` batch and move both parts to `device`."""
    x, y = split_batch(
        batch,
        "The default prepare_batch",
        "Pass prepare_batch=fn(batch, device, non_blocking) -> (x, y) for other batch layouts.",
    )
    return convert_tensor(x, device, non_blocking), convert_tensor(y, device, non_blocking)


def _loss_of(step_output: tuple[Any, Any, Any, torch.Tensor]) -> torch.Tensor:
    return step_output[3]


def identity(output: Any) -> Any:
    return output


def call_model(model: torch.nn.Module, x: Any) -> Any:
    return model(x)


def detached_loss(x: Any, y: Any, y_pred: Any, loss: torch.Tensor) -> torch.Tensor:
    return loss.detach()


def prediction_and_target(x: Any, y: Any, y_pred: Any) -> tuple[Any, Any]:
    return y_pred, y


def device_type_of(device: Device, model: torch.nn.Module) -> str:
    if device is not None:
        return torch.device(device).type
    parameter = next(model.parameters(), None)
    return parameter.device.type if parameter is not None else "cpu"


def _check_accumulation(gradient_accumulation_steps: Any) -> int:
    if not (
        is_integral(gradient_accumulation_steps)
        and not isinstance(gradient_accumulation_steps, bool)
        and gradient_accumulation_steps > 0
    ):
        raise ValueError(
            "Gradient_accumulation_steps must be strictly positive. No gradient accumulation if the value set to "
            f"one (default). Got {gradient_accumulation_steps!r}; pass a positive integer."
        )
    return int(gradient_accumulation_steps)


def _training_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable,
    device: Device,
    non_blocking: bool,
    prepare_batch: Callable,
    model_transform: Callable,
    output_transform: Callable,
    gradient_accumulation_steps: int,
    model_fn: Callable,
    *,
    autocast_dtype: torch.dtype | None = None,
    scaler: torch.amp.GradScaler | None = None,
    clip_grad_norm: float | None = None,
    optimizer_step: Callable[[torch.optim.Optimizer], None] | None = None,
    gradient_handlers: Sequence[Any] = (),
) -> Callable[[Engine, Any], Any]:
    """The one supervised training step, on a `ModelEngine`. Gradients of `gradient_accumulation_steps`
    consecutive iterations are summed (each loss divided by that number), so the update equals one step on
    their concatenated batch.
    """
    accumulation = _check_accumulation(gradient_accumulation_steps)
    if clip_grad_norm is not None and not (is_real(clip_grad_norm) and clip_grad_norm > 0):
        raise ValueError(f"clip_grad_norm must be a positive number or None, got {clip_grad_norm!r}.")
    step_kwargs: dict[str, Any] = {} if optimizer_step is None else {"optimizer_step": optimizer_step}
    model_engine = ModelEngine(
        model,
        optimizer,
        loss_fn,
        gradient_handlers=gradient_handlers,
        clip_grad_norm=clip_grad_norm,
        scaler=scaler,
        autocast_dtype=autocast_dtype,
        device_type=device_type_of(device, model),
        **step_kwargs,
    )

    def forward(engine: Engine, batch: Any) -> tuple[Any, Any, Any, torch.Tensor]:
        if not model.training:  # an evaluator may have switched it to eval mode
            model_engine.train()
        x, y = prepare_batch(batch, device=device, non_blocking=non_blocking)
        y_pred = model_transform(model_fn(model, x))
        return x, y, y_pred, loss_fn(y_pred, y)

    step = TrainingStep(model_engine, forward, loss_of=_loss_of, windows=IterationWindows(accumulation))

    def update(engine: Engine, batch: Any) -> Any:
        return output_transform(*step(engine, batch))

    update.model_engine = model_engine  # type: ignore[attr-defined]  # for handlers that need the step's parts
    return update


def supervised_training_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable,
    device: Device = None,
    non_blocking: bool = False,
    prepare_batch: Callable = default_prepare_batch,
    model_transform: Callable = identity,
    output_transform: Callable = detached_loss,
    gradient_accumulation_steps: int = 1,
    model_fn: Callable = call_model,
    clip_grad_norm: float | None = None,
) -> Callable[[Engine, Any], Any]:
    """A process function for supervised training in full precision.

    Per iteration: zero the gradients (at the start of an accumulation window), `model.train()`,
    `x, y = prepare_batch(batch, device, non_blocking)`, `y_pred = model_transform(model_fn(model, x))`,
    `loss = loss_fn(y_pred, y)`, backward, optionally clip to `clip_grad_norm`, and step the optimizer (at the
    end of the window). Returns `output_transform(x, y, y_pred, loss)`, by default the detached loss tensor.
    """
    return _training_step(
        model,
        optimizer,
        loss_fn,
        device,
        non_blocking,
        prepare_batch,
        model_transform,
        output_transform,
        gradient_accumulation_steps,
        model_fn,
        clip_grad_norm=clip_grad_norm,
    )


def resolve_amp(
    device_type: str, amp_dtype: torch.dtype | None, scaler: torch.amp.GradScaler | bool | None
) -> tuple[torch.dtype, torch.amp.GradScaler | None]:
    if amp_dtype is None:
        amp_dtype = torch.float16 if device_type == "cuda" else torch.bfloat16
    if amp_dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"amp_dtype must be torch.float16 or torch.bfloat16, got {amp_dtype!r}.")
    if scaler is True:
        scaler = torch.amp.GradScaler(device_type)
    elif scaler is False:
        scaler = None
    if scaler is not None and not isinstance(scaler, torch.amp.GradScaler):
        raise TypeError(f"scaler must be a torch.amp.GradScaler, True, False or None, got {scaler!r}.")
    return amp_dtype, scaler


def supervised_training_step_amp(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable,
    device: Device = None,
    non_blocking: bool = False,
    prepare_batch: Callable = default_prepare_batch,
    model_transform: Callable = identity,
    output_transform: Callable = detached_loss,
    scaler: torch.amp.GradScaler | bool | None = None,
    gradient_accumulation_steps: int = 1,
    model_fn: Callable = call_model,
    amp_dtype: torch.dtype | None = None,
    clip_grad_norm: float | None = None,
) -> Callable[[Engine, Any], Any]:
    """`supervised_training_step` under `torch.autocast`, with an optional `torch.amp.GradScaler`.

    `amp_dtype` defaults to float16 on CUDA and bfloat16 elsewhere. Use a scaler (`scaler=True` or your own)
    with float16; bfloat16 has float32's range and needs none. Gradients are unscaled before clipping.
    """
    amp_dtype, scaler = resolve_amp(device_type_of(device, model), amp_dtype, scaler)
    return _training_step(
        model,
        optimizer,
        loss_fn,
        device,
        non_blocking,
        prepare_batch,
        model_transform,
        output_transform,
        gradient_accumulation_steps,
        model_fn,
        autocast_dtype=amp_dtype,
        scaler=scaler,
        clip_grad_norm=clip_grad_norm,
    )


def supervised_training_step_apex(*args: Any, **kwargs: Any) -> Callable[[Engine, Any], Any]:
    """Kept for code ported from Ignite: always raises, pointing to native AMP."""
    raise NotImplementedError(APEX_MESSAGE)


def supervised_training_step_tpu(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable,
    device: Device = None,
    non_blocking: bool = False,
    prepare_batch: Callable = default_prepare_batch,
    model_transform: Callable = identity,
    output_transform: Callable = detached_loss,
    gradient_accumulation_steps: int = 1,
    model_fn: Callable = call_model,
    clip_grad_norm: float | None = None,
) -> Callable[[Engine, Any], Any]:
    """`supervised_training_step` for XLA devices: gradients are all-reduced across replicas (before any
    clipping), the optimizer steps, and the step is marked as a graph barrier — what `xm.optimizer_step` does,
    split so that clipping sees the reduced gradients. Needs torch_xla."""
    xm = xla_model()

    def xla_step(optimizer: torch.optim.Optimizer) -> None:
        optimizer.step()
        mark_step()

    return _training_step(
        model,
        optimizer,
        loss_fn,
        device,
        non_blocking,
        prepare_batch,
        model_transform,
        output_transform,
        gradient_accumulation_steps,
        model_fn,
        clip_grad_norm=clip_grad_norm,
        optimizer_step=xla_step,
        gradient_handlers=[lambda: xm.reduce_gradients(optimizer)],
    )


def _evaluation_step(
    model: torch.nn.Module,
    device: Device,
    non_blocking: bool,
    prepare_batch: Callable,
    model_transform: Callable,
    output_transform: Callable,
    model_fn: Callable,
    autocast_dtype: torch.dtype | None,
) -> Callable[[Engine, Any], Any]:
    device_type = device_type_of(device, model)

    def evaluate_step(engine: Engine, batch: Any) -> Any:
        if model.training:
            model.eval()
        with torch.no_grad():
            x, y = prepare_batch(batch, device=device, non_blocking=non_blocking)
            if autocast_dtype is None:
                y_pred = model_transform(model_fn(model, x))
            else:
                with torch.autocast(device_type, dtype=autocast_dtype):
                    y_pred = model_transform(model_fn(model, x))
            return output_transform(x, y, y_pred)

    return evaluate_step


def supervised_evaluation_step(
    model: torch.nn.Module,
    device: Device = None,
    non_blocking: bool = False,
    prepare_batch: Callable = default_prepare_batch,
    model_transform: Callable = identity,
    output_transform: Callable = prediction_and_target,
    model_fn: Callable = call_model,
) -> Callable[[Engine, Any], Any]:
    """A process function for evaluation: `model.eval()`, no gradients, returns `output_transform(x, y, y_pred)`
    (by default `(y_pred, y)`, what metrics take)."""
    return _evaluation_step(
        model, device, non_blocking, prepare_batch, model_transform, output_transform, model_fn, None
    )


def supervised_evaluation_step_amp(
    model: torch.nn.Module,
    device: Device = None,
    non_blocking: bool = False,
    prepare_batch: Callable = default_prepare_batch,
    model_transform: Callable = identity,
    output_transform: Callable = prediction_and_target,
    model_fn: Callable = call_model,
    amp_dtype: torch.dtype | None = None,
) -> Callable[[Engine, Any], Any]:
    """`supervised_evaluation_step` under `torch.autocast` (float16 on CUDA, bfloat16 elsewhere by default)."""
    amp_dtype, _ = resolve_amp(device_type_of(device, model), amp_dtype, None)
    return _evaluation_step(
        model, device, non_blocking, prepare_batch, model_transform, output_transform, model_fn, amp_dtype
    )
