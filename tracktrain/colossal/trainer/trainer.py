"""Colossal-AI's `Trainer(engine, timer, logger)` with `fit(train_dataloader, epochs, ...)`, on tracktrain's Trainer.

Each batch is one training iteration of tracktrain's Trainer: `engine.zero_grad()`, the schedule's forward and
backward, `engine.step()` — the engine's own gradient accumulation letting a window's first zero and last step
through, as in Colossal-AI, whose Trainer also calls them every batch. So `cur_step` and `max_steps` count
iterations, as Colossal-AI's do. The built-in hooks are the Trainer's callbacks; a `BaseHook` of the script's own is
run through `_HookCallback`, at the points of the run its overridden methods name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence, Sized
from typing import Any

import torch

from tracktrain.callbacks.base import Callback
from tracktrain.colossal.trainer.hooks import BaseHook, in_priority_order
from tracktrain.distributed.logger import DistributedLogger
from tracktrain.engine.batches import split_batch
from tracktrain.engine.events import Events
from tracktrain.engine.model_engine import ModelEngine
from tracktrain.handlers.multi_timer import MultiTimer
from tracktrain.trainer.supervised_module import SupervisedModule
from tracktrain.trainer.trainer import Trainer as LoopTrainer

__all__ = ["Trainer"]


class Trainer:
    """Trains the engine from `initialize(...)` on `(inputs, labels)` batches; hooks run in order of priority.

    Args:
        engine: the engine (model, optimizer, criterion, gradient handlers, clipping, precision, accumulation).
        timer: the `MultiTimer` the timing hook reports from (pass the same one to `LogTimingByEpochHook`).
        logger: the `DistributedLogger` for the run's messages.
        **trainer_options: tracktrain.Trainer's arguments, e.g. `loggers=[MLflowLogger(...)]` to track the run in
            MLflow or W&B, `default_root_dir=...`, `resume="auto"`.
    """

    def __init__(
        self,
        engine: ModelEngine,
        timer: MultiTimer | None = None,
        logger: DistributedLogger | None = None,
        **trainer_options: Any,
    ) -> None:
        if not isinstance(engine, ModelEngine):
            raise TypeError(
                f"Trainer(engine=...) takes the ModelEngine from tracktrain.colossal.initialize(...), got "
                f"{type(engine).__name__}."
            )
        taken = sorted(set(trainer_options) & _SET_BY_FIT)
        if taken:
            raise TypeError(
                f"Trainer({', '.join(taken)}=...): fit(...) sets these from its own arguments (epochs, max_steps, "
                "test_interval, hooks, display_progress)."
            )
        self.engine = engine
        self.timer = timer
        self.logger = logger
        # Colossal-AI's Trainer runs no sanity validation and prints no model summary (a script may still ask)
        self.trainer_options = {"num_sanity_val_steps": 0, "enable_model_summary": False, **trainer_options}
        self.module = _EngineModule(engine)
        self.trainer: LoopTrainer | None = None
        self.states: dict[str, Any] = {}  # hooks keep what they share here (Colossal-AI's trainer.states)
        self.hooks: list[Any] = []
        self._max_epochs = 0
        self._max_steps: int | None = None
        self._steps_per_epoch = 0

    # --------------------------------------------------------------------------- Colossal-AI's progress names
    @property
    def cur_epoch(self) -> int:
        """The epoch running (from 0), or the number of epochs run once training ended."""
        return self.trainer.current_epoch if self.trainer is not None else 0

    @property
    def cur_step(self) -> int:
        """The training iterations run so far."""
        return self.trainer.global_step if self.trainer is not None else 0

    @property
    def max_epochs(self) -> int:
        return self._max_epochs

    @property
    def max_steps(self) -> int | None:
        return self._max_steps

    @property
    def steps_per_epoch(self) -> int:
        return self._steps_per_epoch

    @property
    def metrics(self) -> dict[str, Any]:
        """The run's latest values (the hooks' and the step's: `train_loss_avg`, `val_accuracy`, `lr`, ...)."""
        return dict(self.trainer.callback_metrics) if self.trainer is not None else {}

    def fit(
        self,
        train_dataloader: Iterable[Any],
        epochs: int,
        max_steps: int | None = None,
        test_dataloader: Iterable[Any] | None = None,
        test_interval: int = 1,
        hooks: Sequence[Any] | None = None,
        display_progress: bool = False,
        return_output_label: bool = True,
    ) -> None:
        """Train for `epochs` (or `max_steps` iterations), evaluating on `test_dataloader` every `test_interval`
        epochs; `hooks` run in order of priority; `display_progress` shows a bar on a terminal."""
        self._steps_per_epoch = len(train_dataloader) if isinstance(train_dataloader, Sized) else 0
        self._max_epochs, self._max_steps = epochs, max_steps
        callbacks = self._attach(hooks)
        self.trainer = LoopTrainer(
            max_epochs=epochs,
            max_steps=max_steps,
            val_every_n_epochs=test_interval,
            callbacks=callbacks,
            enable_progress_bar=display_progress,
            enable_checkpointing=False,
            **self.trainer_options,
        )
        self.trainer.fit(self.module, train_dataloader, test_dataloader)
        if self.logger is not None:
            self.logger.info(
                f"Training finished: {self.trainer.global_step} steps, {self.trainer.current_epoch} epochs.", ranks=[0]
            )

    def evaluate(
        self,
        test_dataloader: Iterable[Any],
        hooks: Sequence[Any] | None = None,
        display_progress: bool = False,
        return_output_label: bool = True,
    ) -> dict[str, float]:
        """Evaluate on `test_dataloader`; returns the evaluation's values (`val_loss`, and what the hooks add)."""
        trainer = LoopTrainer(
            callbacks=self._attach(hooks),
            enable_progress_bar=display_progress,
            enable_checkpointing=False,
            **self.trainer_options,
        )
        (values,) = trainer.validate(self.module, test_dataloader)
        return values

    def predict(self, data: Any) -> Any:
        """The model's output for `data` (a tensor or a list of them), in evaluation mode, without gradients."""
        self.engine.eval()
        with torch.no_grad(), self.engine.autocast():
            return self.engine.model(data)

    def _attach(self, hooks: Sequence[Any] | None) -> list[Callback]:
        """The hooks in order of priority, each a callback; `after_hook_is_attached` run on each hook of the
        script's own."""
        if hooks is None:
            hooks = []
        if not isinstance(hooks, list):
            raise TypeError(f"fit(hooks=...) takes a list of hooks, got {type(hooks).__name__}.")
        for hook in hooks:
            if not isinstance(hook, (BaseHook, Callback)):
                raise TypeError(
                    f"fit(hooks=...) takes hooks (tracktrain.colossal.trainer.hooks.BaseHook subclasses or the "
                    f"built-in hooks), got {hook!r}."
                )
        self.states = {}
        self.hooks = in_priority_order(hooks)
        for hook in self.hooks:
            if isinstance(hook, BaseHook):
                hook.after_hook_is_attached(self)
        return [_HookCallback(hook, self) if isinstance(hook, BaseHook) else hook for hook in self.hooks]


_SET_BY_FIT = {
    "max_epochs",
    "max_steps",
    "val_every_n_epochs",
    "callbacks",
    "enable_progress_bar",
    "accumulate_grad_batches",
}


class _EngineModule(SupervisedModule):
    """The engine's model, trained as `SupervisedModule` does, called as Colossal-AI's schedule calls it (inputs: a
    tensor, or a tuple or dict of arguments; the criterion given the outputs, then the labels), each step's output
    carrying the model's output and the label with the loss, which Colossal-AI's hooks receive after an iteration."""

    def train_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:  # type: ignore[override]  # the loss, with more
        return self._step(batch, "train_loss")

    def eval_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        return self._step(batch, "val_loss")

    def _step(self, batch: Any, name: str) -> dict[str, Any]:
        inputs, targets = split_batch(batch, "Colossal-AI's Trainer", "Give it (inputs, label) batches.")
        output = _call(self.model, inputs)
        loss = _call_criterion(self.criterion, output, targets)
        self.log(name, loss, prog_bar=True)
        return {"loss": loss, "output": output, "target": targets}


def _call(model: Callable[..., Any], inputs: Any) -> Any:
    if isinstance(inputs, (list, tuple)):
        return model(*inputs)
    if isinstance(inputs, dict):
        return model(**inputs)
    return model(inputs)


def _call_criterion(criterion: Callable[..., Any], outputs: Any, labels: Any) -> Any:
    outputs = (outputs,) if isinstance(outputs, torch.Tensor) else outputs
    labels = (labels,) if isinstance(labels, torch.Tensor) else labels
    if isinstance(outputs, dict):
        if not isinstance(labels, dict):
            raise ValueError(
                f"The model's outputs are a dict, so the labels must be one too; got {type(labels).__name__}."
            )
        return criterion(**outputs, **labels)
    if isinstance(labels, dict):
        return criterion(*outputs, **labels)
    return criterion(*outputs, *labels)


# Colossal-AI's hook methods -> (stage, event) of the run, and whether the step's (output, label, loss) go with it
_POINTS: dict[str, tuple[str, Any, bool]] = {
    "before_train": ("fit", Events.STARTED, False),
    "after_train": ("fit", Events.COMPLETED, False),
    "before_train_epoch": ("fit", Events.EPOCH_STARTED, False),
    "after_train_epoch": ("fit", Events.EPOCH_COMPLETED, False),
    "before_train_iter": ("fit", Events.ITERATION_STARTED, False),
    "after_train_iter": ("fit", Events.ITERATION_COMPLETED, True),
    "before_test": ("validate", Events.STARTED, False),
    "after_test": ("validate", Events.COMPLETED, False),
    "before_test_epoch": ("validate", Events.EPOCH_STARTED, False),
    "after_test_epoch": ("validate", Events.EPOCH_COMPLETED, False),
    "before_test_iter": ("validate", Events.ITERATION_STARTED, False),
    "after_test_iter": ("validate", Events.ITERATION_COMPLETED, True),
}


class _HookCallback(Callback):
    """A `BaseHook` of the script's own as a callback: each method it overrides runs at its point, given the
    Colossal `Trainer`; the others are not attached (a hook costs nothing where it does nothing)."""

    def __init__(self, hook: BaseHook, trainer: Trainer) -> None:
        self.hook = hook
        self.colossal_trainer = trainer

    @property
    def state_key(self) -> str:
        return f"{type(self.hook).__qualname__}@{id(self.hook)}"

    def event_handlers(self, trainer: Any) -> Iterable[tuple[str, Any, Callable]]:
        handlers = []
        for name, (stage, event, with_output) in _POINTS.items():
            method = getattr(type(self.hook), name)
            if method is not getattr(BaseHook, name):
                handlers.append((stage, event, self._caller(getattr(self.hook, name), with_output)))
        return handlers

    def _caller(self, method: Callable[..., None], with_output: bool) -> Callable[[Any], None]:
        colossal_trainer = self.colossal_trainer
        if not with_output:
            return lambda engine: method(colossal_trainer)

        def call(engine: Any) -> None:
            output = engine.state.output
            method(colossal_trainer, output["output"], output["target"], output["loss"])

        return call
