"""ModelEngine: the one implementation of "a step" (Colossal-AI's Engine).

It owns the model, the optimizer and the criterion, and runs the parts of an optimization step in the order
that mixed precision and distributed training need::

    model_engine.zero_grad()
    output = model_engine(inputs)  # forward, under autocast when enabled
    loss = model_engine.criterion(output, labels)  # the loss, under the same autocast
    model_engine.backward(loss)  # scaled by the GradScaler when there is one
    model_engine.step()  # gradient handlers -> unscale + clip -> optimizer step -> scaler update

`TrainingStep` (`tracktrain.engine.training_step`) drives it for `create_supervised_trainer` and the Trainer;
precision (autocast dtype, GradScaler), strategy (gradient handlers such as an all-reduce, an optimizer step such
as XLA's) and schedule (how a batch goes through the model) are its parameters, never copies of the loop.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from tracktrain.checks.numeric import is_real
from tracktrain.engine.compiling import compile_module, compile_options
from tracktrain.engine.events import EventEnum
from tracktrain.engine.schedule import BaseSchedule, NonPipelineSchedule

__all__ = ["BaseOpHook", "ModelEngine", "StepEvents", "initialize"]


class StepEvents(EventEnum):
    """Events inside one optimization step, fired by a `ModelEngine` on the Engine it is attached to.

    While they fire, `engine.state.step_loss` holds the loss being backpropagated and
    `engine.state.step_optimizer` the optimizer about to step.
    """

    BACKWARD_STARTED = "backward_started"
    BACKWARD_COMPLETED = "backward_completed"
    OPTIMIZER_STEP_STARTED = "optimizer_step_started"
    OPTIMIZER_STEP_COMPLETED = "optimizer_step_completed"


# Fired through the Engine's hot path (`Engine._fire`) with their keys: an event without handlers costs one dict lookup.
_BACKWARD_STARTED, _BACKWARD_COMPLETED = StepEvents.BACKWARD_STARTED, StepEvents.BACKWARD_COMPLETED
_OPTIMIZER_STEP_STARTED, _OPTIMIZER_STEP_COMPLETED = (
    StepEvents.OPTIMIZER_STEP_STARTED,
    StepEvents.OPTIMIZER_STEP_COMPLETED,
)


class BaseOpHook:
    """Code around every submodule's forward and backward (Colossal-AI's ophooks); override what you need.

    `pre_fwd_exec(module, *inputs)`, `post_fwd_exec(module, *inputs)`, `pre_bwd_exec(module, grad_output)`,
    `post_bwd_exec(module, grad_input)` run for each submodule; `post_iter()` once per `ModelEngine.step()`.
    """

    def pre_fwd_exec(self, module: nn.Module, *inputs: Any) -> None: ...

    def post_fwd_exec(self, module: nn.Module, *inputs: Any) -> None: ...

    def pre_bwd_exec(self, module: nn.Module, grad_output: Any) -> None: ...

    def post_bwd_exec(self, module: nn.Module, grad_input: Any) -> None: ...

    def post_iter(self) -> None: ...


class _AutocastCriterion:
    """The criterion, called under the engine's autocast (the loss belongs to the mixed-precision region)."""

    def __init__(self, criterion: Callable, model_engine: ModelEngine) -> None:
        self.criterion = criterion
        self._model_engine = model_engine

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._model_engine.autocast():
            return self.criterion(*args, **kwargs)

    def __repr__(self) -> str:
        return f"autocast({self.criterion!r})"


def _optimizer_step(optimizer: torch.optim.Optimizer) -> None:
    optimizer.step()


class ModelEngine:
    """Forward, loss, backward and optimizer step for one model, as in Colossal-AI's `Engine`.

    Args:
        model: the module to train.
        optimizer: its optimizer (None for evaluation only).
        criterion: the loss function, reachable as `model_engine.criterion(output, label)`.
        gradient_handlers: run first in `step()`, each an object with `handle_gradient()` or a callable taking
            no argument (e.g. an all-reduce of the gradients across replicas).
        clip_grad_norm: clip the gradients' total norm to this value in `step()` (0 or None: no clipping).
        ophook_list: `BaseOpHook`s around every submodule's forward and backward.
        clip_grad_value: clip each gradient element to [-value, value] in `step()`.
        scaler: a `torch.amp.GradScaler` (fp16): `backward` scales the loss, `step` unscales before clipping
            and skips the update when gradients are inf/NaN.
        autocast_dtype: run forward and loss under `torch.autocast` with this dtype (None: full precision).
        param_dtype: the dtype the model's weights are in under a "true" precision (Lightning's "bf16-true",
            "16-true", "64-true": no autocast): tensors the forward and loss create take it (the default dtype).
        device_type: autocast's device type; by default that of the model's first parameter.
        optimizer_step: how the optimizer steps (default `optimizer.step()`; XLA marks the step too).
        schedule: how a batch goes through the model (`tracktrain.engine.schedule`); default: the whole batch at
            once (`NonPipelineSchedule`).
        compile: `torch.compile` the model's forward, in place (`model.compile`): True, or a dict of torch.compile's
            options (`{"backend": "aot_eager"}`, `{"mode": "max-autotune"}`). Its `state_dict` keys stay the same,
            so checkpoints load in compiled and eager runs alike.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        criterion: Callable | None = None,
        gradient_handlers: Iterable[Any] | None = None,
        clip_grad_norm: float | None = 0.0,
        ophook_list: Iterable[BaseOpHook] | None = None,
        *,
        clip_grad_value: float | None = None,
        scaler: torch.amp.GradScaler | None = None,
        autocast_dtype: torch.dtype | None = None,
        param_dtype: torch.dtype | None = None,
        device_type: str | None = None,
        optimizer_step: Callable[[torch.optim.Optimizer], None] = _optimizer_step,
        schedule: BaseSchedule | None = None,
        compile: bool | Mapping[str, Any] = False,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"ModelEngine needs a torch.nn.Module as model, got {type(model).__name__}.")
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer or None, got {type(optimizer).__name__}.")
        if criterion is not None and not callable(criterion):
            raise TypeError(f"criterion must be callable (e.g. nn.CrossEntropyLoss()), got {criterion!r}.")
        for name, value in (("clip_grad_norm", clip_grad_norm), ("clip_grad_value", clip_grad_value)):
            if value is not None and not (is_real(value) and value >= 0):
                raise ValueError(f"{name} must be a number >= 0 or None, got {value!r}.")
        if scaler is not None and not isinstance(scaler, torch.amp.GradScaler):
            raise TypeError(f"scaler must be a torch.amp.GradScaler or None, got {scaler!r}.")
        if autocast_dtype not in (None, torch.float16, torch.bfloat16):
            raise ValueError(f"autocast_dtype must be torch.float16, torch.bfloat16 or None, got {autocast_dtype!r}.")
        if param_dtype is not None and (autocast_dtype is not None or not param_dtype.is_floating_point):
            raise ValueError(f"param_dtype must be a floating dtype, without autocast_dtype; got {param_dtype!r}.")
        compile_with = compile_options("ModelEngine(compile=...)", compile)
        if compile_with is not None:
            compile_module(model, compile_with)
        self._model = model
        self._optimizer = optimizer
        self._criterion = criterion
        self.gradient_handlers = list(gradient_handlers or ())
        self.clip_grad_norm = clip_grad_norm or None
        self.clip_grad_value = clip_grad_value or None
        self.scaler = scaler
        self.autocast_dtype = autocast_dtype
        self.param_dtype = param_dtype
        if device_type is None:
            parameter = next(model.parameters(), None)
            device_type = parameter.device.type if parameter is not None else "cpu"
        self.device_type = device_type
        self._optimizer_step = optimizer_step
        self._schedule: BaseSchedule = schedule if schedule is not None else NonPipelineSchedule()
        self._ophooks: list[BaseOpHook] = []
        self._ophook_handles: dict[int, list[Any]] = {}
        for ophook in ophook_list or ():
            self.add_hook(ophook)
        self._events_engine: Any = None
        self._skipped: torch.Tensor | int = 0

    def attach(self, engine: Any) -> None:
        """Fire `StepEvents` on `engine` (an Engine) from now on; `detach()` stops it."""
        if not engine.has_registered_events(StepEvents.BACKWARD_STARTED):
            engine.register_events(*StepEvents)
        self._events_engine = engine

    def detach(self) -> None:
        self._events_engine = None

    # --------------------------------------------------------------------------------------------- properties
    @property
    def model(self) -> nn.Module:
        return self._model

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        return self._optimizer

    @property
    def criterion(self) -> Callable | None:
        """The loss function; under mixed precision it runs under the same autocast as the forward."""
        if self._criterion is None or self.autocast_dtype is None:
            return self._criterion
        return _AutocastCriterion(self._criterion, self)

    @property
    def schedule(self) -> BaseSchedule:
        """How a batch goes through the model (forward, loss, backward)."""
        return self._schedule

    @property
    def uses_pipeline(self) -> bool:
        """Whether the schedule is a pipeline over stages on several ranks."""
        return self._schedule.uses_pipeline

    @property
    def ophooks(self) -> list[BaseOpHook]:
        return list(self._ophooks)

    def autocast(self) -> contextlib.AbstractContextManager:
        """The precision region of this engine's forward and loss: `torch.autocast` under mixed precision, the
        weights' dtype as the default dtype under a "true" precision, else nothing."""
        if self.param_dtype is not None:
            return _default_dtype(self.param_dtype)
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.autocast_dtype)

    # ---------------------------------------------------------------------------------------------- the step
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.autocast_dtype is None and self.param_dtype is None:
            return self._model(*args, **kwargs)
        with self.autocast():
            return self._model(*args, **kwargs)

    def zero_grad(self) -> None:
        self._require_optimizer("zero_grad").zero_grad()

    def backward(self, loss: torch.Tensor) -> None:
        """Backpropagate `loss` (scaled first when there is a GradScaler)."""
        events = self._events_engine
        if events is not None:
            events.state.step_loss = loss
            events._fire(_BACKWARD_STARTED, "BACKWARD_STARTED")
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        loss.backward()
        if events is not None:
            events._fire(_BACKWARD_COMPLETED, "BACKWARD_COMPLETED")

    def backward_by_grad(self, tensor: torch.Tensor, grad: torch.Tensor) -> None:
        """Backpropagate from `tensor` given the gradient of the loss with respect to it."""
        if self.scaler is not None:
            grad = self.scaler.scale(grad)
        torch.autograd.backward(tensor, grad)

    def step(self) -> None:
        """Gradient handlers, then unscale + clip, then the optimizer step, then the scaler update."""
        optimizer = self._require_optimizer("step")
        for handler in self.gradient_handlers:
            handle = getattr(handler, "handle_gradient", handler)
            handle()
        events = self._events_engine
        clipping = self.clip_grad_norm is not None or self.clip_grad_value is not None
        if self.scaler is not None and (clipping or events is not None):
            self.scaler.unscale_(optimizer)  # clipping and step handlers see the true gradients, not scaled ones
        if events is not None:
            events.state.step_optimizer = optimizer
            events._fire(_OPTIMIZER_STEP_STARTED, "OPTIMIZER_STEP_STARTED")
        if clipping:
            self.clip_gradients(optimizer, self.clip_grad_norm, self.clip_grad_value, self._schedule.gradient_norm)
        if self.scaler is not None:
            self.scaled_step(optimizer)
            self.scaler.update()
        else:
            self._optimizer_step(optimizer)
        for ophook in self._ophooks:
            ophook.post_iter()
        if events is not None:
            events._fire(_OPTIMIZER_STEP_COMPLETED, "OPTIMIZER_STEP_COMPLETED")

    def scaled_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Step `optimizer` through the GradScaler (skipped, and counted, when its gradients hold inf/NaN); the
        caller updates the scaler once all optimizers of the iteration stepped."""
        self.scaler.step(optimizer)  # type: ignore[union-attr]
        self._count_skipped(optimizer)

    @property
    def skipped_steps(self) -> int:
        """Optimizer steps the GradScaler skipped because the gradients held inf/NaN (reading it waits for the
        device; the count itself is kept there)."""
        return int(self._skipped) if isinstance(self._skipped, torch.Tensor) else self._skipped

    @property
    def skipped_steps_on_device(self) -> torch.Tensor:
        """`skipped_steps` as a tensor on its device, for logging without a sync."""
        return torch.as_tensor(self._skipped)

    def _count_skipped(self, optimizer: torch.optim.Optimizer) -> None:
        # The scaler's per-step inf flags, added up on the device: counting costs no host sync. (A private part
        # of GradScaler, read between step() and update() as its own update() does.)
        found_inf = self.scaler._found_inf_per_device(optimizer)  # type: ignore[union-attr]
        for flag in found_inf.values():
            self._skipped = self._skipped + flag.to(torch.int64)

    def unscale_gradients(self, optimizer: torch.optim.Optimizer | None = None) -> None:
        """Divide `optimizer`'s gradients by the GradScaler's scale (once per step; a no-op without a scaler)."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer if optimizer is not None else self._require_optimizer("unscale_gradients"))

    @staticmethod
    def clip_gradients(
        optimizer: torch.optim.Optimizer,
        max_norm: float | None = None,
        max_value: float | None = None,
        norm_of: Callable[[list[torch.Tensor]], torch.Tensor] | None = None,
    ) -> None:
        """Clip the gradients of `optimizer`'s parameters: their total norm to `max_norm`, then each element to
        [-`max_value`, `max_value`]. With a GradScaler, unscale first (`step()` does). `norm_of(gradients)`: their
        total norm (default this process's; a pipeline's schedule takes it over every stage)."""
        parameters = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if max_norm is not None:
            if norm_of is None:
                torch.nn.utils.clip_grad_norm_(parameters, max_norm)
            else:
                total = norm_of([parameter.grad for parameter in parameters])
                torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total)
        if max_value is not None:
            torch.nn.utils.clip_grad_value_(parameters, max_value)

    def train(self) -> None:
        self._model.train()

    def eval(self) -> None:
        self._model.eval()

    def execute_schedule(self, data_iter: Iterator[Any], **kwargs: Any) -> tuple[Any, Any, torch.Tensor | None]:
        """Run the schedule on the next batch of `data_iter`: forward, the loss and (unless `forward_only=True`)
        backward; returns `(output, label, loss)`. Options: `forward_only`, `return_loss`, `return_output_label`."""
        return self._schedule.forward_backward_step(self, data_iter, **kwargs)

    def _require_optimizer(self, method: str) -> torch.optim.Optimizer:
        if self._optimizer is None:
            raise RuntimeError(f"ModelEngine.{method}() needs an optimizer; this engine was built without one.")
        return self._optimizer

    # ----------------------------------------------------------------------------------------------- ophooks
    def add_hook(self, ophook: BaseOpHook) -> None:
        """Run `ophook` around every submodule's forward and backward."""
        if not isinstance(ophook, BaseOpHook):
            raise TypeError(f"ophooks must subclass tracktrain.engine.BaseOpHook, got {type(ophook).__name__}.")
        handles = []
        for module in self._model.modules():
            handles.append(module.register_forward_pre_hook(lambda m, inputs: ophook.pre_fwd_exec(m, *inputs)))
            handles.append(module.register_forward_hook(lambda m, inputs, output: ophook.post_fwd_exec(m, *inputs)))
            handles.append(module.register_full_backward_pre_hook(lambda m, grad_out: ophook.pre_bwd_exec(m, grad_out)))
            handles.append(
                module.register_full_backward_hook(lambda m, grad_in, grad_out: ophook.post_bwd_exec(m, grad_in))
            )
        self._ophooks.append(ophook)
        self._ophook_handles[id(ophook)] = handles

    def remove_hook(self, ophook: BaseOpHook) -> None:
        """Stop running `ophook`; a ValueError if it was not added."""
        if ophook not in self._ophooks:
            raise ValueError(f"{ophook!r} is not an ophook of this ModelEngine.")
        for handle in self._ophook_handles.pop(id(ophook)):
            handle.remove()
        self._ophooks.remove(ophook)


def initialize(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    criterion: Callable | None = None,
    train_dataloader: Iterable[Any] | None = None,
    test_dataloader: Iterable[Any] | None = None,
    lr_scheduler: Any = None,
    **model_engine_kwargs: Any,
) -> tuple[ModelEngine, Iterable[Any] | None, Iterable[Any] | None, Any]:
    """Colossal-AI's `initialize`: wrap the model, optimizer and criterion into a `ModelEngine` and return it with
    the data loaders and the LR scheduler: `(model_engine, train_dataloader, test_dataloader, lr_scheduler)`.

    Extra keyword arguments go to `ModelEngine` (`clip_grad_norm`, `scaler`, `autocast_dtype`, ...).
    """
    return (
        ModelEngine(model, optimizer, criterion, **model_engine_kwargs),
        train_dataloader,
        test_dataloader,
        lr_scheduler,
    )


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """`dtype` as torch's default dtype inside (the tensors a "true"-precision forward creates match its weights)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)
