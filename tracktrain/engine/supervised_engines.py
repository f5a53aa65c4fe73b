"""`create_supervised_trainer` and `create_supervised_evaluator`: Engines built on the supervised steps of
`tracktrain.engine.supervised`, with Ignite's arguments."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from tracktrain.engine.deterministic import DeterministicEngine
from tracktrain.engine.engine import Engine
from tracktrain.engine.supervised import (
    APEX_MESSAGE,
    Device,
    call_model,
    default_prepare_batch,
    detached_loss,
    device_type_of,
    identity,
    prediction_and_target,
    resolve_amp,
    supervised_evaluation_step,
    supervised_evaluation_step_amp,
    supervised_training_step,
    supervised_training_step_amp,
    supervised_training_step_tpu,
)

__all__ = ["create_supervised_evaluator", "create_supervised_trainer"]


def _check_amp_mode(amp_mode: str | None, on_xla: bool, scaler: Any) -> str | None:
    if amp_mode == "apex":
        raise ValueError(APEX_MESSAGE)
    if amp_mode not in (None, "amp"):
        raise ValueError(f"amp_mode must be None or 'amp', got {amp_mode!r}.")
    if on_xla and amp_mode is not None:
        raise ValueError("amp_mode is for CUDA/CPU autocast; on an XLA device leave it None (XLA uses bf16 natively).")
    if scaler not in (None, False) and amp_mode != "amp":
        raise ValueError(
            f"scaler argument is {scaler}, but amp_mode is {amp_mode}. Consider using amp_mode='amp': a GradScaler "
            "only makes sense with autocast."
        )
    return amp_mode


def create_supervised_trainer(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable,
    device: Device = None,
    non_blocking: bool = False,
    prepare_batch: Callable = default_prepare_batch,
    model_transform: Callable = identity,
    output_transform: Callable = detached_loss,
    deterministic: bool = False,
    amp_mode: str | None = None,
    scaler: torch.amp.GradScaler | bool = False,
    gradient_accumulation_steps: int = 1,
    model_fn: Callable = call_model,
    clip_grad_norm: float | None = None,
    amp_dtype: torch.dtype | None = None,
) -> Engine:
    """An Engine that trains `model` on `(x, y)` batches.

    Args:
        device: where batches are moved (the model must already be there).
        deterministic: use `DeterministicEngine` (reproducible and exactly resumable data order).
        amp_mode: None for full precision, or "amp" for `torch.autocast` (`amp_dtype`, float16 on CUDA and
            bfloat16 elsewhere by default). On an XLA device the TPU step is chosen automatically.
        scaler: with amp_mode="amp", True creates a `torch.amp.GradScaler` (kept in `engine.state.scaler`, so
            it can be checkpointed), or pass your own.
        gradient_accumulation_steps: iterations whose gradients are summed before each optimizer step.
        clip_grad_norm: clip the gradients' total norm before each optimizer step.
        output_transform: `f(x, y, y_pred, loss)` -> `engine.state.output`; default: the detached loss.
    """
    on_xla = device is not None and "xla" in torch.device(device).type
    amp_mode = _check_amp_mode(amp_mode, on_xla, scaler)
    common: dict[str, Any] = dict(  # the arguments every step variant takes
        device=device,
        non_blocking=non_blocking,
        prepare_batch=prepare_batch,
        model_transform=model_transform,
        output_transform=output_transform,
        gradient_accumulation_steps=gradient_accumulation_steps,
        model_fn=model_fn,
        clip_grad_norm=clip_grad_norm,
    )
    created_scaler = None
    if on_xla:
        try:
            step = supervised_training_step_tpu(model, optimizer, loss_fn, **common)
        except ModuleNotFoundError as error:  # Ignite's error for this call, with the install hint
            raise RuntimeError(f"In order to run on TPU, please install PyTorch XLA: {error}") from error
    elif amp_mode == "amp":
        amp_dtype, created_scaler = resolve_amp(device_type_of(device, model), amp_dtype, scaler)
        step = supervised_training_step_amp(
            model, optimizer, loss_fn, scaler=created_scaler, amp_dtype=amp_dtype, **common
        )
    else:
        step = supervised_training_step(model, optimizer, loss_fn, **common)
    engine = DeterministicEngine(step) if deterministic else Engine(step)
    if created_scaler is not None:
        engine.state.scaler = created_scaler
    return engine


def create_supervised_evaluator(
    model: torch.nn.Module,
    metrics: Mapping[str, Any] | None = None,
    device: Device = None,
    non_blocking: bool = False,
    prepare_batch: Callable = default_prepare_batch,
    model_transform: Callable = identity,
    output_transform: Callable = prediction_and_target,
    amp_mode: str | None = None,
    model_fn: Callable = call_model,
    amp_dtype: torch.dtype | None = None,
) -> Engine:
    """An Engine that evaluates `model` on `(x, y)` batches and attaches `metrics` (name -> metric) to it.

    Each metric receives `output_transform(x, y, y_pred)`, by default `(y_pred, y)`.
    """
    on_xla = device is not None and "xla" in torch.device(device).type
    amp_mode = _check_amp_mode(amp_mode, on_xla, None)
    common: dict[str, Any] = dict(  # the arguments every step variant takes
        device=device,
        non_blocking=non_blocking,
        prepare_batch=prepare_batch,
        model_transform=model_transform,
        output_transform=output_transform,
        model_fn=model_fn,
    )
    if amp_mode == "amp":
        step = supervised_evaluation_step_amp(model, amp_dtype=amp_dtype, **common)
    else:
        step = supervised_evaluation_step(model, **common)
    evaluator = Engine(step)
    for name, metric in (metrics or {}).items():
        if not callable(getattr(metric, "attach", None)):
            raise TypeError(
                f"Metric {name!r} must have an attach(engine, name) method (a tracktrain.metrics.Metric), "
                f"got {metric!r}."
            )
        metric.attach(evaluator, name)
    return evaluator
