"""`FitStep`: a Trainer's training iteration — the batch counted and logged against, then the one `TrainingStep`
(automatic optimization) or the module's own `train_step` (manual), and what follows each optimizer step."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from tracktrain.engine.batches import cast_floating, move_to_device
from tracktrain.engine.engine import Engine
from tracktrain.engine.model_engine import ModelEngine, StepEvents
from tracktrain.engine.training_step import TrainingStep
from tracktrain.trainer.accumulation import AccumulationSchedule
from tracktrain.trainer.batches import batch_size_of
from tracktrain.trainer.hooks import batch_index
from tracktrain.trainer.module import LoopModule, checked_loss
from tracktrain.trainer.scaled_optimizer import HookOptimizer
from tracktrain.trainer.strategies.base import Strategy

if TYPE_CHECKING:
    from tracktrain.trainer.fit_context import FitContext
    from tracktrain.trainer.metrics_hub import MetricsHub
    from tracktrain.trainer.nonfinite import NonFiniteWatch
    from tracktrain.trainer.trainer_state import TrainerState

__all__ = ["FitStep"]


class FitStep:
    """The process function of a Trainer's training engine, set up for one fit (`setup`).

    Under automatic optimization the step is `TrainingStep` with Lightning's accumulation windows (counted per
    epoch, the last one flushed at an epoch's end); a loss the Trainer's `nonfinite` policy refuses skips its
    window's optimizer step. Under manual optimization the module steps its optimizers itself; the steps are
    followed through the optimizers' step hooks, so that they count the same.
    """

    def __init__(
        self,
        context: FitContext,
        strategy: Strategy,
        nonfinite_watch: NonFiniteWatch,
        *,
        check_finite: Callable[[], None],
        stop_at_limit: Callable[[], None],
        take_a_stop_that_waited: Callable[[], None],
    ) -> None:
        """`context`: the fit's (its module, model engine, optimizers, schedulers and accumulation, read at `setup`);
        `nonfinite_watch`: judges each loss; `check_finite`: acts on the losses seen (at each log step); `stop_at_limit`: ends the fit now,
        every rank alike (max_steps); `take_a_stop_that_waited`: a stop that waited for min_epochs/min_steps, taken
        once they are done (at each step's end)."""
        self._context, self._strategy, self._nonfinite_watch = context, strategy, nonfinite_watch
        self._check_finite, self._stop_at_limit = check_finite, stop_at_limit
        self._take_a_stop_that_waited = take_a_stop_that_waited
        self._step_hooks: list[Any] = []
        # set by `setup` for each fit
        self._training_step: TrainingStep
        self._module: LoopModule
        self._model_engine: ModelEngine
        self._engine: Engine
        self._state: TrainerState
        self._metrics: MetricsHub
        self._max_steps: int | None = None
        self._log_every_n_steps = 1
        self._train_forward: Callable[[Any, int], Any]
        self._device: torch.device | None = None  # where batches go; None: they stay where they are (CPU)
        self._dtype: torch.dtype | None = None  # a "true" precision's: floating inputs cast to the weights' dtype

    def _accumulation(self) -> AccumulationSchedule:
        schedule = self._context.accumulation
        assert schedule is not None  # set before the step is (`Session._setup`)
        return schedule

    def setup(
        self,
        train_forward: Callable[[Any, int], Any],
        engine: Engine,
        state: TrainerState,
        metrics: MetricsHub,
        *,
        max_steps: int | None,
        log_every_n_steps: int,
        param_dtype: torch.dtype | None,
    ) -> None:
        """Build the step for the fit starting (the module, its optimizers and model engine are set up in the
        context). `engine`: the training engine this step is the process function of; `state` and `metrics` (the
        step counters, the values' hub) are built over that engine, so they come here rather than at construction;
        `max_steps`, `log_every_n_steps` and `param_dtype` (a "true" precision's weights' dtype) are the Trainer's
        settings as this fit starts (settable between fits)."""
        context, strategy = self._context, self._strategy
        module, model_engine = context.module, context.model_engine
        assert module is not None and model_engine is not None  # set before the step is (`Session._setup`)
        self._module, self._model_engine = module, model_engine
        self._engine, self._state, self._metrics = engine, state, metrics
        self._max_steps, self._log_every_n_steps = max_steps, log_every_n_steps
        self._device = context.device if context.device.type != "cpu" else None
        self._dtype = param_dtype
        for optimizer in context.optimizers:
            optimizer.zero_grad()
        self._training_step = TrainingStep(
            model_engine,
            lambda engine, batch: train_forward(batch, batch_index(engine)),
            loss_of=checked_loss,
            windows=self._accumulation().windows(),
            no_sync=strategy.no_sync,
            accept_loss=self._accept_loss,
            on_optimizer_step=self._after_optimizer_step,
            reduce_gradients=lambda: strategy.reduce_gradients(module),
            **self._hooks(module, model_engine, strategy),
        )
        self._train_forward = train_forward
        if not module.automatic_optimization:  # the module steps its optimizers itself: follow those steps
            self._step_hooks = [
                hook
                for optimizer in context.optimizers
                for hook in (
                    optimizer.register_step_pre_hook(self._manual_step_starting),
                    optimizer.register_step_post_hook(lambda *_: self.count_step()),
                )
            ]

    @staticmethod
    def _hooks(module: LoopModule, model_engine: ModelEngine, strategy: Strategy) -> dict[str, Any]:
        """The module's `optimizer_step` / `optimizer_zero_grad` where it overrides Lightning's defaults, and the
        strategy's `zero_grad` around the zeroing where it overrides the base's (the default path calls none of
        them: nothing to add to each step)."""
        hooks: dict[str, Any] = {}
        optimizer = model_engine.optimizer
        overridden = lambda name: getattr(type(module), name) is not getattr(LoopModule, name)  # noqa: E731
        if optimizer is None:
            return hooks
        zero: Callable[[Engine], None] = lambda engine: model_engine.zero_grad()  # noqa: E731
        if overridden("optimizer_zero_grad"):
            zero = lambda engine: module.optimizer_zero_grad(  # noqa: E731
                engine.state.epoch - 1, batch_index(engine), optimizer
            )
            hooks["zero_grad"] = zero
        if type(strategy).zero_grad is not Strategy.zero_grad:  # e.g. torchft's quorum before the forward
            module_zero = zero
            hooks["zero_grad"] = lambda engine: strategy.zero_grad(lambda: module_zero(engine))
        if overridden("optimizer_step"):
            hooks["optimizer_step"] = lambda engine, closure, take_step: module.optimizer_step(
                engine.state.epoch - 1, batch_index(engine), HookOptimizer(optimizer, take_step), closure
            )
        return hooks

    def teardown(self) -> None:
        for hook in self._step_hooks:
            hook.remove()
        self._step_hooks = []

    def __call__(self, engine: Engine, batch: Any) -> Any:
        if self._device is not None:  # CPU tensors stay where they are: no walk over the batch
            batch = move_to_device(batch, self._device)
        if self._dtype is not None:
            batch = cast_floating(batch, self._dtype)
        self._metrics.current.batch = batch  # the log `self.log` writes to (`trainer.metric_log`)
        self._state.samples_seen += batch_size_of(batch)  # from shapes: no device sync
        if self._module.automatic_optimization:
            return self._training_step(engine, batch)
        model_engine = self._model_engine
        with model_engine.autocast():
            output = self._train_forward(batch, batch_index(engine))
        if model_engine.scaler is not None:
            self._update_scaler()
        return output

    def flush(self) -> None:
        """An epoch's end: step the accumulation window a loader without a length left open."""
        self._training_step.flush()

    def step_epoch_schedulers(self, engine: Engine) -> None:
        for config in self._context.lr_scheduler_configs:
            if config.interval == "epoch" and engine.state.epoch % config.frequency == 0:
                config.step(self._metrics.callback_metrics)

    def count_step(self) -> None:
        """One optimizer step done: count it, publish the step's values at the log interval, stop at max_steps."""
        state, metrics = self._state, self._metrics
        state.global_step += 1
        if state.global_step % self._log_every_n_steps == 0:
            self._check_finite()  # where values are read back anyway: no sync of its own
            metrics.publish({**metrics.current.step_values(), **self._strategy.step_values()})
        if self._max_steps is not None and state.global_step >= self._max_steps:
            self._stop_at_limit()  # every rank counts the same steps
        else:  # a stop asked for before min_steps were done (nothing to do otherwise: one flag read)
            self._take_a_stop_that_waited()

    def _accept_loss(self, loss: torch.Tensor) -> bool:
        return self._nonfinite_watch.observe(loss, self._state.global_step + 1)

    def _after_optimizer_step(self) -> None:
        self.count_step()
        global_step = self._state.global_step
        for config in self._context.lr_scheduler_configs:
            if config.interval == "step" and global_step % config.frequency == 0:
                config.step(self._metrics.callback_metrics)

    def _update_scaler(self) -> None:
        """fp16 manual optimization: one scale update per batch, after the module stepped its optimizers."""
        scaler = self._model_engine.scaler
        manual_optimizers = self._context.manual_optimizers
        if scaler is not None and any(optimizer.stepped for optimizer in manual_optimizers):
            scaler.update()
            for optimizer in manual_optimizers:
                optimizer.stepped = False

    def _manual_step_starting(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        engine = self._engine
        engine.state.step_optimizer = optimizer
        engine.fire_event(StepEvents.OPTIMIZER_STEP_STARTED)
