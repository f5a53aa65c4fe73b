"""`Trainer`: runs a `LoopModule` on ordinary Engines — fit, validate, test, predict."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from tracktrain.trainer.callback import Callback, check_state_keys
from tracktrain.engine.deterministic import ResumableEngine
from tracktrain.engine.engine import Engine
from tracktrain.engine.events import Events, RemovableEventHandle
from tracktrain.engine.model_engine import ModelEngine, StepEvents
from tracktrain.handlers.savers import deliver_left_over
from tracktrain import distributed
from tracktrain.boundary import Boundary, Decision
from tracktrain.dist_logger import get_dist_logger
from tracktrain.loggers.base import Logger
from tracktrain.loggers.bridge import LoggerBridge
from tracktrain.loggers.csv_logger import CSVLogger
from tracktrain.preemption import SignalWatch, Terminated
from tracktrain.ranks import global_rank
from tracktrain.rng import manual_seed
from tracktrain.trainer import arguments
from tracktrain.trainer.building import as_loop_module, configure_optimizers, model_engine_for
from tracktrain.trainer.batches import batch_size_of, epoch_length_of, move_to_device
from tracktrain.trainer.hooks import TrainerEvents, batch_index
from tracktrain.trainer.metric_log import MetricLog, scalar_values, to_floats
from tracktrain.trainer.module import LoopModule, checked_loss
from tracktrain.trainer.nonfinite import NonFiniteWatch
from tracktrain.trainer.optimizers import LRSchedulerConfig
from tracktrain.trainer.resume import RESUME_CHOICES, check_resume, load_newest, resume_candidates
from tracktrain.trainer.settings import changed_settings, check_resumable, describe, run_settings
from tracktrain.trainer.trainer_state import TrainerState
from tracktrain.trainer.scaled_optimizer import ScaledOptimizer
from tracktrain.trainer.strategies import strategy_for
from tracktrain.trainer.wiring import ExceptionHooks, attach_handlers

__all__ = ["Trainer"]

class Trainer:
    """Trains, validates, tests and predicts with a `LoopModule` (or a plain model + optimizer + criterion).

    `trainer.train_engine` and `trainer.eval_engine` (validation), `test_engine` and `predict_engine` are
    ordinary Engines built here: attach any Ignite-style handler or metric to them; Ignite metrics attached to
    an evaluation engine land in `callback_metrics` with the logged values.

    Args:
        max_epochs: epochs to train (default 1000 when `max_steps` is not given either).
        max_steps: stop after this many optimizer steps, mid-epoch if need be.
        accumulate_grad_batches: batches whose gradients add up before each optimizer step (the loss is divided
            by it, so the step equals one on a batch that many times larger).
        gradient_clip_val: clip gradients before each optimizer step (None or 0: no clipping) ...
        gradient_clip_algorithm: ... by their total norm ("norm") or element-wise ("value").
        val_every_n_epochs: validate at the end of every n-th training epoch.
        val_check_interval: validate every this many training batches instead (counted across epochs).
        limit_train_batches, limit_val_batches, limit_test_batches, limit_predict_batches: batches per epoch
            (int) or fraction of the loader (float); None: all.
        log_every_n_steps: publish per-step logged values every n optimizer steps.
        callbacks: `Callback`s, run in order of their `priority`.
        loggers: trackers (`tracktrain_integrations.mlflow.MLflowLogger`, `...wandb.WandbLogger`, ...); None: a
            `CSVLogger` under `default_root_dir/logs`; False: none. Rank 0 only; runs resume with checkpoints.
        logger: Lightning's name for `loggers` (one logger, a list, True or False); give one of the two.
        seed: seed python, numpy and torch when the Trainer is built (so a model built after it starts from the
            same weights every run) and at the start of each fit/validate/test/predict, and derive the data order
            from it. None: a fit draws a seed, records it in its checkpoints and with the loggers' params.
        deterministic: ask torch for deterministic algorithms (reproducible kernels). Resume is exact without it:
            the training engine is a `ResumableEngine` (data order by seed and pass, skipped by index on resume).
        enable_progress_bar: show a tqdm bar (when the output is a terminal).
        enable_checkpointing: save a checkpoint at each epoch's end under `default_root_dir/checkpoints` unless
            a `ModelCheckpoint` callback is given.
        default_root_dir: directory or fsspec URL for checkpoints and logs.
        preemption_timeout: on SIGTERM/SIGUSR1 or Ctrl-C the fit finishes its step, saves a checkpoint (waiting at most
            this many seconds for the write) and raises `tracktrain.preemption.Terminated` (exit status 128 + signal).
        resume: "auto": each fit continues from the newest complete checkpoint of the run (its `ModelCheckpoint`
            directories), or starts fresh when there is none; a path or URL: from that checkpoint; None: only
            from `fit(ckpt_path=...)`. Exact, batch for batch. A run that already reached `max_epochs`/`max_steps`
            trains nothing (raise the limit to train more); changed Trainer settings are warned about and recorded
            with the loggers.
        resume_with_changes: resume a checkpoint written for another module class or other module `hparams`
            (refused by default, with the differences in the error).
        nonfinite: a NaN or infinite training loss: "error" (default: `NonFiniteLoss` at the next logging step,
            epoch end or checkpoint, naming the step and the newest checkpoint before it), "warn", or "skip_step"
            (skip the steps whose loss is not finite, at the cost of reading every loss back). See
            `tracktrain.trainer.nonfinite`.
        precision: "32-true" (default), "bf16-mixed" or "16-mixed".
        strategy: "auto" / "single_device", or "ddp": data parallel over the processes torchrun starts (or
            `tracktrain.distributed.spawn`), gloo on CPU and nccl on CUDA.
        accelerator: "auto" (CUDA when available), "cpu" or "cuda".
    """

    def __init__(
        self,
        max_epochs: int | None = None,
        max_steps: int | None = None,
        accumulate_grad_batches: int = 1,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str = "norm",
        val_every_n_epochs: int = 1,
        val_check_interval: int | None = None,
        limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None,
        log_every_n_steps: int = 50,
        callbacks: Sequence[Callback] | None = None,
        loggers: Sequence[Logger] | bool | None = None,
        seed: int | None = None,
        deterministic: bool = False,
        enable_progress_bar: bool = True,
        enable_checkpointing: bool = True,
        default_root_dir: str | os.PathLike | None = None,
        precision: str | int = "32-true",
        strategy: str = "auto",
        accelerator: str = "auto",
        preemption_timeout: float = 60.0,
        resume: str | os.PathLike | None = None,
        resume_with_changes: bool = False,
        nonfinite: str = "error",
        logger: Logger | Sequence[Logger] | bool | None = None,
    ) -> None:
        self.max_steps = arguments.check_positive_int("max_steps", max_steps, allow_none=True)
        self.max_epochs = arguments.check_positive_int("max_epochs", max_epochs, allow_none=True)
        if self.max_epochs is None and self.max_steps is None:
            self.max_epochs = 1000
        self.accumulate_grad_batches = arguments.check_positive_int("accumulate_grad_batches", accumulate_grad_batches)
        self.gradient_clip_val = arguments.check_non_negative_number("gradient_clip_val", gradient_clip_val)
        if gradient_clip_algorithm not in ("norm", "value"):
            raise ValueError(
                f'Trainer(gradient_clip_algorithm=...) must be "norm" or "value", got {gradient_clip_algorithm!r}.'
            )
        self.gradient_clip_algorithm = gradient_clip_algorithm
        self.val_every_n_epochs = arguments.check_positive_int("val_every_n_epochs", val_every_n_epochs)
        self.val_check_interval = arguments.check_positive_int("val_check_interval", val_check_interval, allow_none=True)
        self.limits = {
            "fit": arguments.check_limit("limit_train_batches", limit_train_batches),
            "validate": arguments.check_limit("limit_val_batches", limit_val_batches),
            "test": arguments.check_limit("limit_test_batches", limit_test_batches),
            "predict": arguments.check_limit("limit_predict_batches", limit_predict_batches),
        }
        self.log_every_n_steps = arguments.check_positive_int("log_every_n_steps", log_every_n_steps)
        callbacks = arguments.as_list("Trainer(callbacks=...)", callbacks, "tracktrain.callbacks.Callback instances")
        for callback in callbacks:
            if not isinstance(callback, Callback):
                raise TypeError(
                    f"Trainer(callbacks=...) takes tracktrain.callbacks.Callback instances, got {callback!r}. "
                    "Attach plain Engine handlers to trainer.train_engine instead."
                )
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise TypeError(f"Trainer(seed=...) must be an int or None, got {seed!r}.")
        self.seed = seed
        if seed is not None:  # `Trainer(seed=0)` then `fit(Model())`: the model's initial weights follow the seed
            manual_seed(seed)
        self.deterministic = bool(deterministic)
        self.default_root_dir = (arguments.check_location("Trainer(default_root_dir=...)", default_root_dir)
                                 if default_root_dir is not None else os.getcwd())
        self.resume = check_resume(resume)
        self.resume_with_changes = bool(resume_with_changes)
        self._nonfinite = NonFiniteWatch(nonfinite)
        self.nonfinite = nonfinite
        self._skip_step = False  # a loss of the current accumulation window was not finite ("skip_step")
        self.run_seed = seed  # the seed of the data order; drawn (or taken from the checkpoint) when a fit starts
        self.settings: dict[str, Any] = {}  # run_settings() of the current fit, saved in its checkpoints
        self.resume_changes: dict[str, tuple[Any, Any]] = {}  # settings that differ from the checkpoint resumed
        self.preemption_timeout = arguments.check_non_negative_number("preemption_timeout", preemption_timeout,
                                                                    allow_infinite=True)
        self._signals = SignalWatch(on_signal=self._arm_preemption_check)
        self._preemption_checks: list[RemovableEventHandle] = []
        self._signal_agreement: distributed.AsyncAnyRank | None = None
        self.ckpt_path: str | None = None  # the checkpoint the current (or last) fit resumed from
        self.autocast_dtype = arguments.autocast_dtype_of(precision)
        self.precision = precision
        self.strategy = arguments.check_strategy(strategy)
        self._strategy = strategy_for(self.strategy)
        self._distributed_loaders: dict[int, Iterable[Any]] = {}
        self._stop_requested = False
        self.device = arguments.device_of(accelerator)
        if logger is not None:  # Lightning's spelling, the same meaning (one logger or several, True, False)
            if loggers is not None:
                raise ValueError(f"Trainer got both logger={logger!r} and loggers={loggers!r}; pass one of them "
                                 "(loggers=[...] is tracktrain's name, logger= Lightning's).")
            loggers = [logger] if isinstance(logger, Logger) else logger
        self.loggers: list[Logger] = _loggers_from(loggers)
        self._logger_bridge = LoggerBridge(self.loggers)
        self.callbacks = callbacks + self._default_callbacks(callbacks, enable_progress_bar, enable_checkpointing)
        self.callbacks.append(self._logger_bridge)
        check_state_keys(self.callbacks)

        self.train_engine: Engine = ResumableEngine(self._train_iteration)
        self.eval_engine = Engine(self._eval_iteration)
        self.test_engine = Engine(self._eval_iteration)
        self.predict_engine = Engine(self._predict_iteration)
        self.train_engine.register_events(*TrainerEvents)
        self.engines = {"fit": self.train_engine, "validate": self.eval_engine, "test": self.test_engine,
                        "predict": self.predict_engine}

        self.callback_metrics: dict[str, Any] = {}
        self.logged_metrics: dict[str, float] = {}
        self._progress_bar_names: set[str] = set()
        self.logs = {
            stage: MetricLog(stage, self.callback_metrics, self._progress_bar_names, stage == "fit", batch_size_of)
            for stage in ("fit", "validate", "test")
        }
        self.metric_log = self.logs["fit"]
        self.state = TrainerState(self)
        self.module: LoopModule | None = None
        self.model_engine: ModelEngine | None = None
        self.optimizers: list[torch.optim.Optimizer] = []
        self.manual_optimizers: list[Any] = []  # what LoopModule.optimizers() hands out
        self.lr_scheduler_configs: list[LRSchedulerConfig] = []
        self._predictions: list[Any] = []
        self._last_values: dict[str, dict[str, Any]] = {}
        self._step_hooks: list[Any] = []
        self._autocast = self.autocast_dtype is not None
        self._pending_batches = 0  # batches whose gradients wait for the next optimizer step
        self.fitting = False  # True while fit() runs (not during a validate()/test() of its own)
        self.val_dataloaders: Any = None

    def _default_callbacks(self, given: list[Callback], progress_bar: bool, checkpointing: bool) -> list[Callback]:
        from tracktrain.callbacks.model_checkpoint import ModelCheckpoint
        from tracktrain.callbacks.progress import TrainerProgressBar

        defaults: list[Callback] = []
        if progress_bar and not any(isinstance(c, TrainerProgressBar) for c in given):
            defaults.append(TrainerProgressBar())
        if checkpointing and not any(isinstance(c, ModelCheckpoint) for c in given):
            defaults.append(ModelCheckpoint(dirpath=_join(self.default_root_dir, "checkpoints")))
        return defaults

    # ------------------------------------------------------------------------------------------- progress
    @property
    def global_step(self) -> int:
        """Optimizer steps taken in this run (the step axis of every logged value)."""
        return self.state.global_step

    @property
    def current_epoch(self) -> int:
        """The training epoch being run, counted from 0; after an epoch's end hooks, the epochs finished."""
        engine = self.train_engine
        in_epoch = self.fitting and engine.last_event_name not in (Events.COMPLETED, Events.TERMINATE)
        return max(engine.state.epoch - 1, 0) if in_epoch else engine.state.epoch

    @property
    def progress_bar_metrics(self) -> dict[str, Any]:
        """The latest values logged with `prog_bar=True` (tensors; read them only when shown)."""
        return {name: self.callback_metrics[name] for name in self._progress_bar_names if name in self.callback_metrics}

    def stop(self, *, agreed: bool = False) -> None:
        """End training after the current iteration. An epoch cut short still ends as the run's last one: its
        end hooks, validation, schedulers and checkpoints run. Callable from any hook or handler of the run.

        Under DDP a request from any one rank is agreed on by all at the end of the epoch, so no rank stops
        alone and leaves the others waiting. `agreed=True`: every rank takes this decision at this same step
        (max_steps, an early-stopping check all-reduced across ranks): stop now, without that agreement."""
        if distributed.is_distributed() and not agreed:
            self._stop_requested = True
            return
        self._stop_now()

    def _stop_now(self) -> None:
        engine = self.train_engine
        if engine.last_event_name in (Events.STARTED, Events.EPOCH_STARTED, Events.EPOCH_COMPLETED):
            engine.terminate()  # no epoch to cut: at its start (nothing ran yet) or its end (all of it ran)
            return
        engine.state.max_epochs = engine.state.epoch
        engine.terminate_epoch()

    # ------------------------------------------------------------------------------------------ entry points
    def fit(
        self,
        module: LoopModule | nn.Module | ModelEngine,
        train_dataloaders: Iterable[Any] | None = None,
        val_dataloaders: Iterable[Any] | None = None,
        ckpt_path: str | os.PathLike | None = None,
        *,
        optimizer: torch.optim.Optimizer | None = None,
        criterion: Callable | None = None,
        lr_scheduler: Any = None,
    ) -> None:
        """Train `module` on `train_dataloaders`, validating on `val_dataloaders`; resume from `ckpt_path`: a path
        or URL, or "last" (the newest complete checkpoint of the run). Without it, `Trainer(resume=...)` decides;
        with neither, a fit is a new run: step and epoch counters start at 0.

        `module` may also be a plain `nn.Module` (with `optimizer=` and `criterion=`) or a `ModelEngine` from
        `tracktrain.initialize`: it is then trained as a `SupervisedModule` on `(inputs, targets)` batches.
        """
        module = as_loop_module(module, optimizer, criterion, lr_scheduler)
        if ckpt_path is not None:
            ckpt_path = arguments.check_location("Trainer.fit(ckpt_path=...)", ckpt_path,
                                                 'a checkpoint file\'s path or URL, or "last"')
        _check_loader("train_dataloaders", train_dataloaders, required=True)
        _check_loader("val_dataloaders", val_dataloaders)
        if val_dataloaders is not None:
            _require_override(module, "eval_step", "validate with val_dataloaders")
        epoch_length = epoch_length_of("limit_train_batches", train_dataloaders, self.limits["fit"])
        if epoch_length == 0:
            return
        self.val_dataloaders = val_dataloaders
        stages = {"fit", "validate"} if val_dataloaders is not None else {"fit"}

        def run() -> None:
            self._resume_from(ckpt_path if ckpt_path is not None else self.resume, module)
            if self._already_finished():
                return
            self.train_engine.fire_event(TrainerEvents.FIT_STARTED)
            loader = self._loader_for(train_dataloaders, shuffle_default=True)
            epoch_length = epoch_length_of("limit_train_batches", loader, self.limits["fit"])
            self.fitting = True
            self._signals.install()
            # ranks that step in lockstep (DDP) agree on a signal every step; other ranks may step differently
            self._signal_agreement = distributed.AsyncAnyRank() if self.strategy == "ddp" else None
            try:
                self.train_engine.run(loader, max_epochs=self._max_epochs(epoch_length),
                                      epoch_length=epoch_length, seed=self.run_seed)
            finally:
                self.fitting = False
                self._signals.restore()
                if self._signal_agreement is not None:
                    self._signal_agreement.finish()
            self.train_engine.fire_event(TrainerEvents.FIT_COMPLETED)
            self._strategy.finish()

        self._session(module, stages, "fit", run, training=True, val_loader=val_dataloaders)

    def validate(self, module: LoopModule | None = None, dataloaders: Iterable[Any] | None = None) -> list[dict[str, float]]:
        """Run `eval_step` over `dataloaders`; returns `[{metric: value}]` (also in `callback_metrics`)."""
        return self._evaluate("validate", module, dataloaders)

    def test(self, module: LoopModule | None = None, dataloaders: Iterable[Any] | None = None) -> list[dict[str, float]]:
        """Run `test_step` over `dataloaders`; returns `[{metric: value}]` (also in `callback_metrics`)."""
        return self._evaluate("test", module, dataloaders)

    def predict(self, module: LoopModule | None = None, dataloaders: Iterable[Any] | None = None) -> list[Any]:
        """Run `predict_step` over `dataloaders`; returns the outputs, one per batch."""
        module = self._module_for("predict", module)
        _check_loader("dataloaders", dataloaders, required=True)
        self._predictions = []
        self._session(module, {"predict"}, "predict", lambda: self._run_stage("predict", dataloaders))
        predictions, self._predictions = self._predictions, []
        return predictions

    def _evaluate(self, stage: str, module: LoopModule | None, loader: Any) -> list[dict[str, float]]:
        module = self._module_for(stage, module)
        _check_loader("dataloaders", loader, required=True)
        if not (stage == "test" and type(module).test_step is not LoopModule.test_step):
            _require_override(module, "eval_step", stage)
        values: dict[str, Any] = {}

        def run() -> None:
            values.update(self._run_stage(stage, loader))

        self._session(module, {stage}, stage, run)
        return [to_floats(values)]

    def _session(self, module: LoopModule, stages: set[str], outermost: str, run: Callable[[], None],
                 training: bool = False, val_loader: Any = None) -> None:
        """Set up, attach, `run()`, and detach whatever happens; `on_exception` hooks see any failure once."""
        handles: list[RemovableEventHandle] = []
        exception_hooks: ExceptionHooks | None = None
        try:
            self._setup(module, training)
            handles, exception_hooks = attach_handlers(self, stages, outermost, val_loader)
            run()
        except BaseException as exception:
            if exception_hooks is not None:
                exception_hooks.notify(self.engines[outermost], exception)
            raise
        finally:
            self._teardown(handles)

    def _module_for(self, stage: str, module: LoopModule | None) -> LoopModule:
        if module is None:
            if self.module is None:
                raise ValueError(f"Trainer.{stage}() needs a module: pass one, or call fit() first.")
            return self.module
        if not isinstance(module, LoopModule):
            raise TypeError(f"Trainer.{stage}(module=...) needs a LoopModule, got {type(module).__name__}.")
        return module

    # --------------------------------------------------------------------------------------- set-up / tear-down
    def _setup(self, module: LoopModule, training: bool) -> None:
        self.device = self._strategy.setup(self.device)
        self._distributed_loaders = {}
        self._stop_requested = False
        if self.seed is not None:
            manual_seed(self.seed)
        if self.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)
        module._trainer = self
        self.module = module
        module.to(self.device)
        if training:
            self.optimizers, self.lr_scheduler_configs = configure_optimizers(module)
            self._nonfinite.reset()
            self._skip_step = False
            self.model_engine = model_engine_for(self, module)
            self.model_engine.attach(self.train_engine)
            self._train_forward = self._strategy.train_forward(module)
            for optimizer in self.optimizers:
                optimizer.zero_grad()
            self._pending_batches = 0
            self.manual_optimizers = list(self.optimizers)
            if self.model_engine.scaler is not None and not module.automatic_optimization:
                self.manual_optimizers = [ScaledOptimizer(opt, self.model_engine) for opt in self.optimizers]
            if not module.automatic_optimization:  # the module steps its optimizers itself: follow those steps
                self._step_hooks = [
                    hook for optimizer in self.optimizers for hook in (
                        optimizer.register_step_pre_hook(self._manual_step_starting),
                        optimizer.register_step_post_hook(lambda *_: self._count_step()),
                    )
                ]
        elif self.model_engine is None or self.model_engine.model is not module:
            self.model_engine = ModelEngine(module, autocast_dtype=self.autocast_dtype, device_type=self.device.type)
        self._autocast = self.model_engine.autocast_dtype is not None

    def _max_epochs(self, epoch_length: int | None) -> int:
        if self.max_epochs is not None:
            return self.max_epochs
        if epoch_length is None:
            return 2**62  # max_steps stops the run; an unsized loader never reports how many epochs that is
        steps_per_epoch = math.ceil(epoch_length / self.accumulate_grad_batches)
        return math.ceil(self.max_steps / steps_per_epoch)

    def _start_new_run(self) -> None:
        """A fit without a checkpoint starts over, even after an interrupted or crashed fit of this Trainer."""
        self.state.global_step = 0
        self.state.samples_seen = 0
        self.train_engine.state.max_epochs = None
        self.train_engine.state.max_iters = None

    def _teardown(self, handles: list[RemovableEventHandle]) -> None:
        for handle in handles + self._preemption_checks:
            handle.remove()
        self._preemption_checks = []
        for hook in self._step_hooks:
            hook.remove()
        self._step_hooks = []
        if self.model_engine is not None:
            self.model_engine.detach()
        self.metric_log = self.logs["fit"]

    # ------------------------------------------------------------------------------------------- training
    def _train_iteration(self, engine: Engine, batch: Any) -> Any:
        batch = self._to_device(batch)
        self.metric_log.batch = batch
        self.state.samples_seen += batch_size_of(batch)  # from shapes: no device sync
        batch_idx = batch_index(engine)
        accumulate = self.accumulate_grad_batches
        if accumulate == 1:
            output = self._forward_backward(batch, batch_idx, 1)
            if self.module.automatic_optimization:
                self._optimizer_step()
            elif self.model_engine.scaler is not None:
                self._update_scaler()
            return output
        steps_now = (batch_idx + 1) % accumulate == 0 or batch_idx + 1 == engine.state.epoch_length
        # DDP all-reduces gradients only on the batch whose step uses them
        with contextlib.nullcontext() if steps_now else self._strategy.no_sync():
            output = self._forward_backward(batch, batch_idx, accumulate)
        if self.module.automatic_optimization:
            self._pending_batches += 1
            if steps_now:
                self._optimizer_step()
        elif self.model_engine.scaler is not None:
            self._update_scaler()
        return output

    def _update_scaler(self) -> None:
        """fp16 manual optimization: one scale update per batch, after the module stepped its optimizers."""
        if any(optimizer.stepped for optimizer in self.manual_optimizers):
            self.model_engine.scaler.update()
            for optimizer in self.manual_optimizers:
                optimizer.stepped = False

    def _forward_backward(self, batch: Any, batch_idx: int, accumulate: int) -> Any:
        """The module's step (through DDP when distributed), then, under automatic optimization, backward of its
        loss (divided by the accumulated batches)."""
        if self._autocast:
            with self.model_engine.autocast():
                output = self._train_forward(batch, batch_idx)
        else:
            output = self._train_forward(batch, batch_idx)
        if self.module.automatic_optimization:
            loss = checked_loss(output)
            if self._nonfinite.observe(loss, self.state.global_step + 1):
                self.model_engine.backward(loss / accumulate if accumulate > 1 else loss)
            else:
                self._skip_step = True  # its gradients would be NaN: the window's optimizer step is skipped
        return output

    def _optimizer_step(self) -> None:
        if not self._skip_step:
            self.model_engine.step()
        self._skip_step = False
        self.model_engine.zero_grad()
        self._pending_batches = 0
        self._count_step()
        for config in self.lr_scheduler_configs:
            if config.interval == "step" and self.state.global_step % config.frequency == 0:
                config.step(self.callback_metrics)

    def _flush_accumulation(self) -> None:
        """A loader without a length ends an epoch in the middle of an accumulation window: step what it holds
        (every batch of it ran under DDP's `no_sync`, not knowing it was the last: reduce its gradients first)."""
        if self._pending_batches:
            self._strategy.reduce_gradients(self.module)
            self._optimizer_step()

    def _manual_step_starting(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        engine = self.train_engine
        engine.state.step_optimizer = optimizer
        engine.fire_event(StepEvents.OPTIMIZER_STEP_STARTED)

    def _count_step(self) -> None:
        """One optimizer step done: count it, publish the step's values at the log interval, stop at max_steps."""
        state = self.state
        state.global_step += 1
        if state.global_step % self.log_every_n_steps == 0:
            self.check_finite()  # where values are read back anyway: no sync of its own
            self.publish(self.metric_log.step_values())
        if self.max_steps is not None and state.global_step >= self.max_steps:
            self.stop(agreed=True)  # every rank counts the same steps

    def _step_epoch_schedulers(self, engine: Engine) -> None:
        for config in self.lr_scheduler_configs:
            if config.interval == "epoch" and engine.state.epoch % config.frequency == 0:
                config.step(self.callback_metrics)

    # ------------------------------------------------------------------------------------------ evaluation
    def _run_stage(self, stage: str, loader: Any) -> dict[str, Any]:
        """Run the evaluation engine of `stage` once over `loader` (no gradients, module in eval mode); returns
        the epoch's values."""
        module, outer_log = self.module, self.metric_log
        training = module.training
        loader = self._loader_for(loader, shuffle_default=False)
        epoch_length = epoch_length_of(f"limit_{_LIMIT_NAMES[stage]}_batches", loader, self.limits[stage])
        if epoch_length == 0:
            return {}
        module.eval()
        try:
            with torch.no_grad():
                self.engines[stage].run(loader, max_epochs=1, epoch_length=epoch_length)
        finally:
            module.train(training)
            self.metric_log = outer_log
        return self._last_values.pop(stage, {})

    def _eval_iteration(self, engine: Engine, batch: Any) -> Any:
        batch = self._to_device(batch)
        log = self.metric_log
        log.batch = batch
        step = self.module.test_step if log.stage == "test" else self.module.eval_step
        with self.model_engine.autocast():
            return step(batch, batch_index(engine))

    def _predict_iteration(self, engine: Engine, batch: Any) -> Any:
        batch = self._to_device(batch)
        with torch.no_grad(), self.model_engine.autocast():
            return self.module.predict_step(batch, batch_index(engine))

    def _keep_prediction(self, engine: Engine) -> None:
        self._predictions.append(engine.state.output)

    # ------------------------------------------------------------------------------------- logged values
    def _enter_stage(self, stage: str) -> None:
        self.metric_log = self.logs[stage]
        self.metric_log.reset()
        if stage == "fit":
            self.module.train()

    def _reduce_epoch(self, stage: str, engine: Engine) -> None:
        if stage == "fit":
            self.check_finite()
        metrics = scalar_values(engine.state.metrics)  # Ignite metrics attached to the engine (and trackers)
        if stage == "fit" and self.model_engine.scaler is not None:
            metrics["amp/skipped_steps"] = self.model_engine.skipped_steps_on_device  # inf/NaN gradients, so far
        self.callback_metrics.update(metrics)
        self._last_values[stage] = {**self.logs[stage].epoch_values(), **metrics}

    def _publish_epoch(self, stage: str, engine: Engine) -> None:
        self.publish({**self._last_values.get(stage, {}), **self.logs[stage].epoch_values()})

    def publish(self, values: Mapping[str, Any]) -> None:
        """The one path logged values take to `logged_metrics` and the loggers (read from the device here), at the
        current global step; callbacks that compute their own values (timing, memory) publish them here."""
        if not values:
            return
        floats = to_floats(dict(values))
        self.logged_metrics.update(floats)
        if self.fitting:  # the same axes for every tracker: the step, and the epoch and samples behind it
            floats = {**floats, "epoch": float(self.current_epoch), "samples_seen": float(self.state.samples_seen)}
        self._logger_bridge.log_metrics(floats, self.state.global_step)

    def checkpoint_committed(self, path: str, step: int | None = None) -> None:
        """A checkpoint callback committed `path`, taken at global step `step`: loggers that keep checkpoints
        upload it."""
        self._logger_bridge.checkpoint_saved(path, step)

    def persist_logs(self) -> None:
        """Make what the loggers hold durable before a checkpoint commits (see `LoggerBridge.persist`): a run
        killed after that commit resumes past these steps and would never log them again."""
        self._logger_bridge.persist()

    def check_finite(self) -> None:
        """Act on the losses seen since the last check as `Trainer(nonfinite=...)` says (a host-device sync; every
        rank must call it at the same point). The Trainer checks at each log step, each epoch end and each save."""
        self._nonfinite.check(self._newest_checkpoint_before)

    def _newest_checkpoint_before(self, step: int) -> str | None:
        """The newest committed checkpoint of this run taken before optimizer step `step` (for the message)."""
        from tracktrain.callbacks.model_checkpoint import ModelCheckpoint
        from tracktrain.handlers.manifest import committed_checkpoints

        for callback in self.callbacks:
            if isinstance(callback, ModelCheckpoint):
                callback.wait()  # a save in flight may be the one asked for
        for directory in self._checkpoint_dirs():
            for checkpoint in committed_checkpoints(directory)[0]:  # newest first
                if checkpoint.summary.get("global_step", 0) < step:
                    return checkpoint.url
        return None

    # -------------------------------------------------------------------------------------------- checkpoints
    def checkpoint_objects(self) -> dict[str, Any]:
        """What a checkpoint of this run holds: the module, optimizers, LR schedulers, the train engine's state and
        the Trainer's own (global step, callbacks); give it to `Checkpoint(to_save=...)`."""
        objects: dict[str, Any] = {"model": self.module, "train_engine": self.train_engine, "trainer": self.state}
        if self.optimizers:
            objects["optimizers"] = list(self.optimizers)
        if self.lr_scheduler_configs:
            objects["lr_schedulers"] = [config.scheduler for config in self.lr_scheduler_configs]
        if self.model_engine is not None and self.model_engine.scaler is not None:
            objects["grad_scaler"] = self.model_engine.scaler
        return objects

    def _resume_from(self, target: str | os.PathLike | None, module: LoopModule) -> None:
        """Load the checkpoint `target` names ("auto"/"last": the newest complete one), or start a new run; then fix
        the run's seed and settings (what its checkpoints save)."""
        self.ckpt_path = None
        self.resume_changes = {}
        load = lambda url: self._load_checkpoint(url, module)  # noqa: E731
        if target is not None and os.fspath(target) in RESUME_CHOICES:
            if global_rank() == 0:  # rank 0's spool: what an earlier run could not write goes first
                for directory in self._checkpoint_dirs():
                    deliver_left_over(directory, self.default_root_dir)
            distributed.rank_zero_value(None)  # no rank lists the directory before that
            self.ckpt_path = load_newest(resume_candidates(self._checkpoint_dirs()), load)
            if self.ckpt_path is None and target == "last":
                warnings.warn(f'fit(ckpt_path="last") found no complete checkpoint in {self._checkpoint_dirs()}; '
                              "starting a new run.", stacklevel=5)
        elif target is not None:
            load(os.fspath(target))
            self.ckpt_path = os.fspath(target)
        if self.ckpt_path is None:
            self._start_new_run()
        distributed.check_same_on_all_ranks("global step after loading the checkpoint", self.global_step)
        if self.ckpt_path is None:
            seed = self.seed if self.seed is not None else _draw_seed()
        else:
            seed = self.train_engine.state.seed  # the data order of the run being continued
        # rank 0's, on every rank (the same collective on all of them): the DistributedSampler shuffles alike
        self.run_seed = distributed.rank_zero_value(seed)
        self._strategy.seed = self.run_seed or 0
        self.settings = run_settings(self, module)

    def _already_finished(self) -> bool:
        """Whether the checkpoint resumed already reached the limits: then nothing is trained, nothing is logged."""
        if self.ckpt_path is None:
            return False
        state = self.train_engine.state
        epochs_done = state.iteration // state.epoch_length if state.epoch_length else state.epoch
        if self.max_steps is not None and self.global_step >= self.max_steps:
            reached = f"max_steps={self.max_steps}"
        elif self.max_epochs is not None and epochs_done >= self.max_epochs:
            reached = f"max_epochs={self.max_epochs}"
        else:
            return False
        get_dist_logger().info(
            f"Run already finished at epoch {epochs_done}, step {self.global_step} ({self.ckpt_path}); raise "
            f"{reached.split('=')[0]} (now {reached.split('=')[1]}) to train more."
        )
        return True

    def _checkpoint_dirs(self) -> list[str]:
        from tracktrain.callbacks.model_checkpoint import ModelCheckpoint

        return [callback.dirpath or _join(self.default_root_dir, "checkpoints")
                for callback in self.callbacks if isinstance(callback, ModelCheckpoint)]

    def _load_checkpoint(self, ckpt_path: str, module: LoopModule) -> None:
        """Read `ckpt_path`, refuse it when it was written for another module (see `settings`), then load it; the
        Trainer settings that changed are warned about here and recorded by the loggers."""
        from tracktrain.handlers.checkpoint import Checkpoint
        from tracktrain.handlers.checkpoint_state import read_checkpoint

        states = read_checkpoint(ckpt_path)
        saved = (states.get("trainer") or {}).get("settings") if isinstance(states, Mapping) else None
        current = run_settings(self, module)
        if self.seed is None:  # the seed is the checkpoint's unless one is given
            current["trainer"].pop("seed")
            if saved:
                saved = {**saved, "trainer": {k: v for k, v in saved.get("trainer", {}).items() if k != "seed"}}
        changes = changed_settings(saved, current)
        check_resumable(changes, ckpt_path, self.resume_with_changes)
        Checkpoint.load_objects(self.checkpoint_objects(), states)
        self.resume_changes = changes
        limits = {key: change for key, change in changes.items() if key in _LIMIT_SETTINGS}
        others = {key: change for key, change in changes.items() if key not in _LIMIT_SETTINGS}
        if limits:  # raising a limit is how a finished run trains more: expected, not a warning
            get_dist_logger().info(f"Resuming {ckpt_path} with {describe(limits)}.")
        if others:
            warnings.warn(f"Resuming {ckpt_path} with changed settings: {describe(others)}. The run continues "
                          "with the new ones; the loggers record the change.", stacklevel=6)

    def _loader_for(self, loader: Iterable[Any], shuffle_default: bool) -> Iterable[Any]:
        """`loader` as the strategy reads it (this process's shard under DDP), made once per entry point."""
        key = id(loader)
        if key not in self._distributed_loaders:
            self._distributed_loaders[key] = self._strategy.distribute(loader, shuffle_default)
        return self._distributed_loaders[key]

    def _arm_preemption_check(self, signum: int) -> None:
        """In the signal handler: check at the next step's end. (Without DDP the steps carry no check until a
        signal comes; under DDP every step exchanges the flag, see `wiring`.)"""
        if self._signal_agreement is None:
            self._preemption_checks += [self.engines[stage].add_event_handler(Events.ITERATION_COMPLETED,
                                                                              self._check_preemption)
                                        for stage in ("fit", "validate")]

    def _check_preemption(self) -> None:
        """After each step: a pre-emption signal (on any rank, under DDP) saves a checkpoint and stops the run."""
        signum = self._signals.received or 0
        if self._signal_agreement is not None:
            signum = self._signal_agreement.exchange(signum)
        if signum:
            self._preempt(signum)

    def _preempt(self, signum: int) -> None:
        from tracktrain.callbacks.model_checkpoint import ModelCheckpoint

        deadline = time.monotonic() + self.preemption_timeout
        checkpoints = [callback for callback in self.callbacks if isinstance(callback, ModelCheckpoint)]
        for checkpoint in checkpoints:
            checkpoint.save_now(self)
        saved = all([checkpoint.wait(max(0.0, deadline - time.monotonic())) for checkpoint in checkpoints])
        held_by = next((checkpoint.last_model_path for checkpoint in checkpoints if checkpoint.last_model_path), None)
        if not checkpoints:
            outcome = "nothing was saved (no ModelCheckpoint): a new run starts over"
        elif not saved:
            outcome = (f"its checkpoint did not finish within preemption_timeout={self.preemption_timeout}s: running "
                       "the same command again resumes from the newest complete one")
        else:
            outcome = f"{held_by} holds it: run the same command again to resume"
        message = f"Stopped by {signal.Signals(signum).name} after step {self.global_step}; {outcome}."
        get_dist_logger().info(message)  # the one line a person reads; the exit status says "pre-empted"
        raise Terminated(signum, message)

    def decisions(self) -> list[Decision]:
        """The Trainer's own decisions at the boundaries (see `tracktrain.boundary`): under DDP, a stop any rank
        asked for during the epoch is everyone's at its end."""
        if not distributed.is_distributed():
            return []
        return [Decision(Boundary.TRAIN_EPOCH_END, "stop requested", propose=lambda: self._stop_requested,
                         agree="any", act=self._stop_if_agreed)]

    def _stop_if_agreed(self, agreed: float) -> None:
        self._stop_requested = False
        if agreed:
            self.train_engine.terminate()

    def _to_device(self, batch: Any) -> Any:
        if self.device.type == "cpu":
            return batch  # CPU tensors stay where they are: no walk over the batch
        return move_to_device(batch, self.device)


_LIMIT_NAMES = {"fit": "train", "validate": "val", "test": "test", "predict": "predict"}
_LIMIT_SETTINGS = ("trainer/max_epochs", "trainer/max_steps")


def _draw_seed() -> int:
    """A fresh seed for a run given none (recorded in its checkpoints and params, so the run can be repeated)."""
    return int.from_bytes(os.urandom(4), "little") >> 1


def _loggers_from(loggers: Sequence[Logger] | bool | None) -> list[Logger]:
    if loggers is None or loggers is True:
        return [CSVLogger()]
    if loggers is False:
        return []
    loggers = arguments.as_list("Trainer(loggers=...)", loggers, "tracktrain.loggers.Logger instances")
    for logger in loggers:
        if not isinstance(logger, Logger):
            raise TypeError(
                f"Trainer(loggers=...) takes tracktrain.loggers.Logger instances (MLflowLogger, WandbLogger, "
                f"CSVLogger, ...), got {logger!r}."
            )
    names = [logger.name for logger in loggers]
    if len(set(names)) != len(names):
        raise ValueError(f"Trainer(loggers=...) has two loggers of one kind {names}; their run ids would collide.")
    return loggers


def _check_loader(name: str, loader: Any, required: bool = False) -> None:
    if loader is None:
        if required:
            raise ValueError(f"{name} is required: pass a DataLoader or another iterable of batches.")
        return
    if not isinstance(loader, Iterable) or isinstance(loader, (str, bytes, Mapping)):
        raise TypeError(f"{name} must be a DataLoader or another iterable of batches, got {type(loader).__name__}: "
                        f"{loader!r:.80}.")


def _require_override(module: LoopModule, method: str, purpose: str) -> None:
    if getattr(type(module), method) is getattr(LoopModule, method):
        raise NotImplementedError(
            f"To {purpose}, {type(module).__name__} must define {method}(self, batch, batch_idx)."
        )


def _join(root: str, name: str) -> str:
    from tracktrain import storage

    return storage.join(root, name)
