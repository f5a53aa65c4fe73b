"""`Trainer`: runs a `LoopModule` on ordinary Engines — fit, validate, test, predict."""

from __future__ import annotations

import datetime
import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from tracktrain.checkpoint.resume import check_resume
from tracktrain.checks.refusal import show_refusals_plainly
from tracktrain.distributed import ranks
from tracktrain.distributed.boundary import Decision
from tracktrain.distributed.logger import get_dist_logger
from tracktrain.engine.deterministic import ResumableEngine
from tracktrain.engine.engine import Engine
from tracktrain.engine.events import Events
from tracktrain.engine.model_engine import ModelEngine
from tracktrain.rng import manual_seed
from tracktrain.trainer import arguments, defaults
from tracktrain.trainer.attributes import TRAINER_ATTRIBUTES, refuse_attribute, refusing_unknown_arguments
from tracktrain.trainer.building import as_loop_module
from tracktrain.trainer.callback import Callback, check_state_keys, with_module_callbacks
from tracktrain.trainer.datamodule import DataModule, StageData
from tracktrain.trainer.evaluation import EvaluationStages, print_results
from tracktrain.trainer.fit_context import FitContext, current_epoch
from tracktrain.trainer.fit_step import FitStep
from tracktrain.trainer.hooks import TrainerEvents
from tracktrain.trainer.metric_log import MetricLog
from tracktrain.trainer.metrics_hub import MetricsHub
from tracktrain.trainer.model_preparation import ActivationCheckpointing
from tracktrain.trainer.module import LoopModule
from tracktrain.trainer.nonfinite import NonFiniteWatch
from tracktrain.trainer.optimizers import LRSchedulerConfig
from tracktrain.trainer.preemption_control import PreemptionControl
from tracktrain.trainer.quick_checks import FastDevRun, check_fast_dev_run
from tracktrain.trainer.run_checkpoints import CheckpointSettings, RunCheckpoints
from tracktrain.trainer.run_order import RunOrder, RunOrderSettings
from tracktrain.trainer.sanity_check import sanity_steps
from tracktrain.trainer.session import Ckpt, Data, Session
from tracktrain.trainer.strategies import Strategy, strategy_for
from tracktrain.trainer.surface import Checkpointer, ModuleHost
from tracktrain.trainer.trainer_state import TrainerState
from tracktrain.trainer.training_time import TrainingTime

if TYPE_CHECKING:
    from tracktrain.loggers.base import Logger

__all__ = ["Trainer"]


class Trainer:
    """Trains, validates, tests and predicts with a `LoopModule` (or a plain model + optimizer + criterion).

    `train_engine`, `eval_engine` (validation), `test_engine` and `predict_engine` are ordinary Engines: attach any
    Ignite-style handler or metric (on an evaluation engine, it lands in `callback_metrics`).

    Args:
        max_epochs, max_steps: epochs to train (1000 if neither is given, nor max_time); optimizer steps (mid-epoch if
            need be).
        max_time: stop training after this long (Lightning's: "DD:HH:MM:SS", a timedelta, or `{"hours": 4}`),
            counted over the run's resumes; the cut epoch still validates and saves. With max_epochs/max_steps,
            whichever comes first.
        accumulate_grad_batches: batches whose gradients add up before each optimizer step (the loss is divided
            by it, so the step equals one on a batch that many times larger).
        gradient_clip_val, gradient_clip_algorithm: clip gradients before each step by their norm or by value.
        val_every_n_epochs: validate at the end of every n-th training epoch (Lightning's `check_val_every_n_epoch`:
            the same setting under that name; give one of the two).
        val_check_interval: validate every this many training batches of those epochs instead (counted within each
            epoch, across epochs for a loader without a length), or a float: that fraction of the epoch (0.5: twice).
        limit_train_batches, limit_val_batches, limit_test_batches, limit_predict_batches: batches per epoch
            (int) or fraction of the loader (float); None: all.
        log_every_n_steps: publish per-step logged values every n optimizer steps.
        callbacks: `Callback`s, run in the order given, after the module's own hooks (a callback's `phase` places it
            elsewhere in the run's order). `trainer.callbacks` holds them with the defaults, and the `LoggerBridge`
            whose state (the trackers' run ids) rides in checkpoints with theirs.
        loggers: trackers (`tracktrain_integrations.mlflow.MLflowLogger`, `...wandb.WandbLogger`, ...); None:
            Lightning's default, a `TensorBoardLogger` where tensorboard is installed, else a `CSVLogger`, both
            under `default_root_dir/lightning_logs`; False: none. Rank 0 only; runs resume with checkpoints.
        logger: Lightning's name for `loggers` (one logger, a list, True or False); give one of the two.
        seed: seed python, numpy and torch when the Trainer is built (so a model built after it starts from the
            same weights every run) and at the start of each fit/validate/test/predict, and derive the data order
            from it. None: a fit draws a seed, records it in its checkpoints and with the loggers' params.
        deterministic: Lightning's: True makes torch's nondeterministic kernels an error
            (`torch.use_deterministic_algorithms`), "warn" a warning, False allows them, None leaves torch's setting.
            Resume is exact without it: the training engine is a `ResumableEngine` (data order by seed and pass,
            skipped by index on resume).
        benchmark: `torch.backends.cudnn.benchmark` (cuDNN's autotuner: faster convolutions of fixed shapes, kernels
            chosen per run); None leaves it as it is, but off under `deterministic`. Set when the Trainer is built.
        enable_progress_bar: show a tqdm bar (when the output is a terminal).
        enable_checkpointing: save a checkpoint at each epoch's end under `default_root_dir/checkpoints` unless
            a `ModelCheckpoint` callback is given.
        enable_model_summary: log the module's layers, parameter counts and size as each fit starts (rank 0).
        default_root_dir: directory or fsspec URL for checkpoints and logs.
        preemption_timeout: on SIGTERM/SIGUSR1 or Ctrl-C the fit finishes its step, saves a checkpoint (waiting at most
            this many seconds for the write) and raises `tracktrain.distributed.preemption.Terminated` (exit status 128 + signal).
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
        precision: "32-true" (default), "bf16-mixed" or "16-mixed" (autocast; "16-mixed" with a GradScaler), or
            Lightning's "true" precisions, "bf16-true", "16-true" or "64-true": the weights (and the optimizer's
            state) in that dtype, the floating inputs cast to it, no autocast and no scaler.
        strategy: "auto" / "single_device", "ddp" (data parallel), "fsdp" (FSDP2 sharding) or "pipeline" (a
            PipelineModule's stages) over the processes torchrun starts (or `tracktrain.distributed.spawn`), gloo on
            CPU, nccl on CUDA; or a `Strategy` with options (`FSDPStrategy(auto_wrap=[Block])`).
        accelerator: "auto" (CUDA when available), "cpu" or "cuda".
        activation_checkpointing: recompute these submodules' activations in backward instead of keeping them (less
            memory, one more forward of each): module classes (`[Block]`) or a function of a submodule.
        compile: `torch.compile` the module's forward (without one, each submodule with parameters: what its steps
            call; under "fsdp": each block it shards), once; True or a dict of torch.compile's options. Parameter
            names stay the same: checkpoints load in compiled and eager runs.
        fast_dev_run: True (1) or N: N batches of each stage in one epoch, nothing left behind (no checkpoints,
            tracker runs or resume). overfit_batches: N batches (or a fraction) trained every epoch, in order.
        num_sanity_val_steps: validation batches a fit runs first, their values discarded (0: none, -1: all).
        devices: Lightning's; the processes come from torchrun (`--nproc_per_node`): "auto", or their number, checked.
    """

    @refusing_unknown_arguments
    def __init__(
        self,
        max_epochs: int | None = None,
        max_steps: int | None = None,
        accumulate_grad_batches: int = 1,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str = "norm",
        val_every_n_epochs: int | None = None,
        val_check_interval: int | float | None = None,
        limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None,
        log_every_n_steps: int = 50,
        callbacks: Sequence[Callback] | None = None,
        loggers: Sequence[Logger] | bool | None = None,
        seed: int | None = None,
        deterministic: bool | str | None = None,
        benchmark: bool | None = None,
        enable_progress_bar: bool = True,
        enable_checkpointing: bool = True,
        enable_model_summary: bool = True,
        default_root_dir: str | os.PathLike | None = None,
        precision: str | int = "32-true",
        strategy: str | Strategy = "auto",
        accelerator: str = "auto",
        preemption_timeout: float = 60.0,
        resume: str | os.PathLike | None = None,
        resume_with_changes: bool = False,
        nonfinite: str = "error",
        logger: Logger | Sequence[Logger] | bool | None = None,
        activation_checkpointing: ActivationCheckpointing = None,
        compile: bool | Mapping[str, Any] = False,
        fast_dev_run: bool | int = False,
        overfit_batches: int | float | None = None,
        num_sanity_val_steps: int = 2,
        check_val_every_n_epoch: int | None = None,
        devices: int | str = "auto",
        max_time: str | datetime.timedelta | Mapping[str, float] | None = None,
        min_epochs: int | None = None,
        min_steps: int | None = None,
        detect_anomaly: bool = False,
        reload_dataloaders_every_n_epochs: int = 0,
    ) -> None:
        show_refusals_plainly()  # a lease held elsewhere, a checkpoint refused: the message, not our frames
        self.fast_dev_run = check_fast_dev_run(fast_dev_run)
        limits = arguments.check_limits(
            limit_train_batches, limit_val_batches, limit_test_batches, limit_predict_batches
        )
        self.overfit_batches = arguments.check_limit("overfit_batches", overfit_batches) or None
        if self.overfit_batches is not None:  # as many validation batches as the training ones (`first_batches`)
            limits["validate"] = self.overfit_batches
        self.num_sanity_val_steps = sanity_steps(num_sanity_val_steps, self.fast_dev_run)
        schedule = arguments.validation_schedule(val_every_n_epochs, check_val_every_n_epoch, val_check_interval)
        val_every_n_epochs, val_check_interval = schedule
        if self.fast_dev_run:
            quick = FastDevRun(self.fast_dev_run, callbacks)
            max_epochs, max_steps, limits, val_check_interval, val_every_n_epochs = quick.schedule
            loggers, logger, resume, enable_checkpointing, callbacks = False, None, None, False, quick.callbacks
        self.max_steps = arguments.check_positive_int("max_steps", max_steps, allow_none=True)
        self.min_epochs = arguments.check_positive_int("min_epochs", min_epochs, allow_none=True)
        self.min_steps = arguments.check_positive_int("min_steps", min_steps, allow_none=True)
        self.detect_anomaly = arguments.check_bool("Trainer(detect_anomaly=...)", detect_anomaly)
        self.reload_dataloaders_every_n_epochs = arguments.check_non_negative_int(
            "reload_dataloaders_every_n_epochs", reload_dataloaders_every_n_epochs
        )
        self.max_epochs = arguments.check_positive_int("max_epochs", max_epochs, allow_none=True)
        self.training_time = TrainingTime(max_time)  # the run's, over its resumes; stops the fit at max_time
        self.max_time: datetime.timedelta | None = self.training_time.limit
        if self.max_epochs is None and self.max_steps is None and max_time is None:
            self.max_epochs = 1000
        self.accumulate_grad_batches = arguments.check_positive_int("accumulate_grad_batches", accumulate_grad_batches)
        self.gradient_clip_val = arguments.check_non_negative_number("gradient_clip_val", gradient_clip_val)
        self.gradient_clip_algorithm = arguments.check_clip_algorithm(gradient_clip_algorithm)
        self.val_every_n_epochs, self.val_check_interval = val_every_n_epochs, val_check_interval
        self.limits = limits
        self.log_every_n_steps = arguments.check_positive_int("log_every_n_steps", log_every_n_steps)
        callbacks = arguments.check_callbacks(callbacks, Callback)
        self.seed = arguments.check_seed(seed)
        if seed is not None:  # `Trainer(seed=0)` then `fit(Model())`: the model's initial weights follow the seed
            manual_seed(seed)
        self.deterministic = arguments.check_deterministic(deterministic)
        self.benchmark = benchmark
        arguments.set_torch_flags(self.deterministic, benchmark)
        self.default_root_dir = arguments.root_dir_of(default_root_dir)
        self.resume = check_resume(resume)
        self.resume_with_changes = bool(resume_with_changes)
        self.preemption_timeout = (
            arguments.check_non_negative_number("preemption_timeout", preemption_timeout, allow_infinite=True) or 0.0
        )
        self.autocast_dtype = arguments.autocast_dtype_of(precision)
        self.param_dtype = arguments.param_dtype_of(precision)  # the weights' dtype under a "true" precision
        self.activation_checkpointing = arguments.check_activation_checkpointing(activation_checkpointing)
        self.compile = arguments.check_compile(compile)
        self.precision = precision
        self.strategy: Strategy = strategy_for(strategy)
        arguments.check_devices(devices)
        self.strategy_name = strategy if isinstance(strategy, str) else self.strategy.name  # in the run's settings
        self.nonfinite_watch = NonFiniteWatch(nonfinite, self.strategy)  # its findings agreed by the strategy
        self.nonfinite = nonfinite
        # what a fit creates (module, model engine, optimizers, the resumed checkpoint, the run's seed), one object
        self.context = FitContext(device=arguments.device_of(accelerator), run_seed=seed)
        self.loggers: list[Logger] = defaults.loggers_from(loggers, logger)
        self.logger_bridge = defaults.logger_bridge(self.loggers)
        # one list for the Trainer's life (setting `callbacks` replaces its content): the parts are built with it
        self._callbacks: list[Callback] = callbacks + defaults.default_callbacks(
            callbacks, self.default_root_dir, enable_progress_bar, enable_checkpointing, bool(enable_model_summary)
        )
        self._callbacks.append(self.logger_bridge)  # for its state (the runs' ids); the run's order calls it itself
        check_state_keys(self._callbacks)

        self.fit_step = FitStep(
            self.context,
            self.strategy,
            self.nonfinite_watch,
            check_finite=self.check_finite,
            stop_at_limit=lambda: self.stop(agreed=True, limit=True),
            take_a_stop_that_waited=self.take_a_stop_that_waited,
        )
        self.train_engine: Engine = ResumableEngine(self.fit_step, restart_data_each_epoch=True)  # as Lightning
        self.train_engine.register_events(*TrainerEvents)
        self.state = TrainerState(
            self.context, self._callbacks, self.strategy, self.training_time, self.train_engine, self.check_finite
        )
        self.metrics = MetricsHub(
            self.context, self.state, self.train_engine, self.strategy, self.logger_bridge.log_metrics
        )
        self.session = Session(self)  # how each entry point sets up, runs and tears down
        self._last_fit_stopped = False  # the last fit ended by a stop before its limit (`_last_fit_end`)
        self.evaluation = EvaluationStages(
            self.context,
            self.strategy,
            self.metrics,
            self._callbacks,
            self.limits,
            self.param_dtype,
            self.session.loader_for,
        )
        self.eval_engine = self.evaluation.engines["validate"]
        self.test_engine = self.evaluation.engines["test"]
        self.predict_engine = self.evaluation.engines["predict"]
        self.engines = {
            "fit": self.train_engine,
            "validate": self.eval_engine,
            "test": self.test_engine,
            "predict": self.predict_engine,
        }
        self.checkpoints = RunCheckpoints(
            self._callbacks,
            self.strategy,
            self.context,
            self.state,
            self.train_engine,
            self._checkpoint_settings,
            self.train_epoch_length,
            self.check_finite,
        )
        self.preemption = PreemptionControl(
            self.strategy,
            self.engines,
            self.checkpoints,
            self.state,
            # the checkpointers' `save_now` takes the Trainer, as their other hooks do
            save_all_now=lambda timeout: self.checkpoints.save_all_now(self, timeout),
        )
        self.run_order = RunOrder(  # what each entry point attaches, in the order it runs
            self.context,
            self._callbacks,
            self.strategy,
            self.engines,
            self.metrics,
            self.evaluation,
            self.fit_step,
            self.preemption,
            self.logger_bridge,
            settings=self._run_order_settings,
            decisions=self.decisions,
            reduce_epoch=self.reduce_epoch,
            reload_loaders=self.reload_loaders,
            take_a_stop_that_waited=self.take_a_stop_that_waited,
        )

    own_attributes: ClassVar[frozenset[str]] = frozenset()  # what a subclass adds to TRAINER_ATTRIBUTES

    def _run_order_settings(self) -> RunOrderSettings:
        """The settings the run's order reads, as they are now (read as each entry point attaches it)."""
        return RunOrderSettings(
            val_every_n_epochs=self.val_every_n_epochs,
            val_check_interval=self.val_check_interval,
            min_epochs=self.min_epochs,
            min_steps=self.min_steps,
            reload_dataloaders_every_n_epochs=self.reload_dataloaders_every_n_epochs,
        )

    def _checkpoint_settings(self) -> CheckpointSettings:
        """The settings the run's checkpoints read, as they are now (read when used: they may change between fits)."""
        return CheckpointSettings(
            default_root_dir=self.default_root_dir,
            seed=self.seed,
            resume_with_changes=self.resume_with_changes,
            max_epochs=self.max_epochs,
            max_steps=self.max_steps,
            max_time=self.max_time,
            accumulate_grad_batches=self.accumulate_grad_batches,
            gradient_clip_val=self.gradient_clip_val,
            precision=self.precision,
            strategy_name=self.strategy_name,
            log_every_n_steps=self.log_every_n_steps,
        )

    def __setattr__(self, name: str, value: Any) -> None:
        """Only the Trainer's own attributes (`tracktrain.trainer.attributes`) and settable properties can be set:
        anything else would be silently ignored, so it raises an AttributeError naming what to use."""
        if name not in TRAINER_ATTRIBUTES and name not in self.own_attributes:
            refuse_attribute(type(self), name)
        object.__setattr__(self, name, value)

    # ----------------------------------------------------------------- the fit's state (`FitContext`), read-only
    @property
    def module(self) -> LoopModule | None:
        """The module of the entry point under way (or last run); None before any."""
        return self.context.module

    @property
    def lightning_module(self) -> LoopModule | None:
        """Lightning's name for `module`: the same object."""
        return self.context.module

    @property
    def model(self) -> nn.Module | None:
        """Lightning's `trainer.model`: the module as the strategy runs it (wrapped by DDP, sharded by FSDP; the
        module itself on one device), with the same parameters; None before any entry point."""
        module, engine = self.context.module, self.model_engine
        if engine is not None and module is not None:
            wrapped: Any = engine.model
            while wrapped is not module and isinstance(getattr(wrapped, "module", None), nn.Module):
                wrapped = wrapped.module  # DDP's and the step wrappers' own `.module`
            if wrapped is module:  # the engine runs this module (not a previous entry point's)
                return engine.model
        return module

    @property
    def datamodule(self) -> DataModule | None:
        """The DataModule of the entry point under way (or last run), if it was given one."""
        return self.context.datamodule

    @property
    def device(self) -> torch.device:
        """This process's device (under DDP/FSDP on CUDA, its local rank's)."""
        return self.context.device

    @property
    def model_engine(self) -> ModelEngine | None:
        """The ModelEngine that steps the module (its optimizers, gradient scaler, the strategy's wrapping)."""
        return self.context.model_engine

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        """The optimizers the fit's `configure_optimizers` returned."""
        return self.context.optimizers

    @property
    def manual_optimizers(self) -> list[Any]:
        """What `LoopModule.optimizers()` hands out under manual optimization."""
        return self.context.manual_optimizers

    @property
    def lr_scheduler_configs(self) -> list[LRSchedulerConfig]:
        """The fit's LR schedulers, each with its interval, frequency and monitored metric."""
        return self.context.lr_scheduler_configs

    @property
    def val_dataloaders(self) -> Any:
        """The fit's validation loader (None: the fit does not validate)."""
        return self.context.val_dataloaders

    @property
    def ckpt_path(self) -> str | None:
        """The checkpoint the fit under way (or last run) resumed from; None: it started a new run."""
        return self.context.ckpt_path

    @property
    def run_seed(self) -> int | None:
        """The run's data-order seed: `seed`, else drawn when the fit started or taken from its checkpoint."""
        return self.context.run_seed

    @property
    def settings(self) -> dict[str, Any]:
        """The run's settings (module class and hparams, Trainer arguments): saved in each checkpoint, compared on
        resume, and the loggers' params."""
        return self.context.settings

    @property
    def resume_changes(self) -> dict[str, tuple[Any, Any]]:
        """The settings that differ from the checkpoint resumed: `{"trainer/max_epochs": (old, new)}`."""
        return self.context.resume_changes

    @property
    def fitting(self) -> bool:
        """True while a fit trains (not during a validate()/test() of its own)."""
        return self.context.fitting

    @property
    def sanity_checking(self) -> bool:
        """True during the validation batches a fit runs before training (Lightning's)."""
        return self.context.sanity_checking

    # ------------------------------------------------------------------------------------------- progress
    @property
    def global_step(self) -> int:
        """Optimizer steps taken in this run (the step axis of every logged value)."""
        return self.state.global_step

    @property
    def current_epoch(self) -> int:
        """The training epoch being run, counted from 0; after an epoch's end hooks, the epochs finished."""
        return current_epoch(self.train_engine, self.fitting)

    @property
    def estimated_stepping_batches(self) -> int | float:
        """The optimizer steps the fit under way takes in all (for `OneCycleLR(total_steps=...)` in
        `configure_optimizers`): `max_steps`, or the steps of `max_epochs` epochs when fewer; inf if unknowable."""
        return self.session.estimated_stepping_batches()

    @property
    def is_global_zero(self) -> bool:
        """Whether this is the process of global rank 0 (the one that writes files and talks to trackers)."""
        return self.strategy.global_rank == 0

    @property
    def global_rank(self) -> int:
        """This process's rank among all (0 without DDP/FSDP)."""
        return self.strategy.global_rank

    @property
    def local_rank(self) -> int:
        """This process's rank on its machine (torchrun's LOCAL_RANK)."""
        return ranks.local_rank()

    @property
    def node_rank(self) -> int:
        """This machine's rank among the machines (torchrun's GROUP_RANK)."""
        return ranks.node_rank()

    @property
    def world_size(self) -> int:
        """The number of processes training together."""
        return self.strategy.world_size

    @property
    def num_devices(self) -> int:
        """The processes on this machine (torchrun's LOCAL_WORLD_SIZE; Lightning's devices per node)."""
        return ranks.local_world_size()

    @property
    def num_nodes(self) -> int:
        """The machines training together (torchrun's --nnodes)."""
        return max(1, self.world_size // max(1, self.num_devices))

    # -------------------------------------------------------------------------------------------- trackers
    @property
    def logger(self) -> Logger | None:
        """Lightning's `trainer.logger`: the first of `loggers` (None without any), with Lightning's logger surface
        (`experiment`, `log_hyperparams`, `log_metrics`, `log_dir`, ...)."""
        return self.loggers[0] if self.loggers else None

    @logger.setter
    def logger(self, logger: Logger | None) -> None:
        """`trainer.logger = X` (Lightning's): X is the Trainer's one logger from now on (None: no logger). Between
        fits only: the runs of a fit are open while it trains."""
        if self.logger_bridge.active:
            raise RuntimeError("trainer.logger = ... while a fit trains: its runs are open. Set it before fit().")
        self.loggers[:] = defaults.loggers_from([] if logger is None else [logger])  # the bridge keeps this list

    @property
    def log_dir(self) -> str:
        """Lightning's `trainer.log_dir`: the first logger's folder for this run (its `log_dir`, else its
        `save_dir`), else `default_root_dir`."""
        for logger in self.loggers[:1]:
            folder = logger.log_dir or logger.save_dir
            if folder is not None:
                return os.fspath(folder)
        return self.default_root_dir

    @property
    def running_module(self) -> LoopModule:
        """The module of the fit/validate/test/predict under way (or last run)."""
        if self.module is None:
            raise RuntimeError("The Trainer has no module yet: call fit/validate/test/predict first.")
        return self.module

    @property
    def running_model_engine(self) -> ModelEngine:
        """The ModelEngine that steps the module of the entry point under way (or last run)."""
        if self.model_engine is None:
            raise RuntimeError("The Trainer has no model engine yet: call fit/validate/test/predict first.")
        return self.model_engine

    @property
    def callback_metrics(self) -> dict[str, Any]:
        """The latest value of everything logged (tensors) and of the Ignite metrics of the engines."""
        return self.metrics.callback_metrics

    @property
    def logged_metrics(self) -> dict[str, float]:
        """The latest values sent to the loggers."""
        return self.metrics.logged_metrics

    @property
    def logs(self) -> dict[str, MetricLog]:
        return self.metrics.logs

    @property
    def metric_log(self) -> MetricLog:
        """The log `LoopModule.log` writes to: that of the stage running."""
        return self.metrics.current

    @property
    def progress_bar_metrics(self) -> dict[str, Any]:
        """The latest values logged with `prog_bar=True` (tensors; read them only when shown)."""
        return self.metrics.progress_bar_metrics()

    # ------------------------------------------------------------------- the surface callbacks and hooks use
    def stop(self, *, agreed: bool = False, limit: bool = False) -> None:
        """End training after the current iteration. An epoch cut short still ends as the run's last one: its
        end hooks, validation, schedulers and checkpoints run. Callable from any hook or handler of the run.

        Under DDP a request from any one rank is agreed on by all at the end of the epoch, so no rank stops
        alone and leaves the others waiting. `agreed=True`: every rank takes this decision at this same step
        (max_steps, an early-stopping check all-reduced across ranks): stop now, without that agreement.
        Before `min_epochs` / `min_steps` are done a request waits for them, as Lightning's; `limit=True` (the
        run's own limits: max_steps, max_time) does not wait."""
        if not limit and self._stop_waits_for_the_minimum():
            return
        if self.strategy.is_distributed and not agreed:
            self.session.stop_requested = True
            return
        engine = self.train_engine
        if engine.last_event_name in (Events.STARTED, Events.EPOCH_STARTED, Events.EPOCH_COMPLETED):
            engine.terminate()  # no epoch to cut: at its start (nothing ran yet) or its end (all of it ran)
            return
        engine.state.max_epochs = engine.state.epoch
        engine.terminate_epoch()

    def _stop_waits_for_the_minimum(self) -> bool:
        """Whether a stop asked for now waits until `min_epochs` epochs and `min_steps` steps are done (it is then
        taken as soon as they are: `take_a_stop_that_waited`)."""
        if self._minimum_done():
            return False
        if not self.context.stop_waits:
            self.context.stop_waits = True
            get_dist_logger().info(
                f"The fit was asked to stop at epoch {self.current_epoch}, step {self.global_step}, before "
                f"min_epochs={self.min_epochs} / min_steps={self.min_steps}: it stops once they are done."
            )
        return True

    def _minimum_done(self) -> bool:
        engine = self.train_engine
        epochs_done = engine.state.epoch - (0 if engine.last_event_name is Events.EPOCH_COMPLETED else 1)
        return (self.min_steps is None or self.global_step >= self.min_steps) and (
            self.min_epochs is None or epochs_done >= self.min_epochs
        )

    def take_a_stop_that_waited(self) -> None:
        """At a step's or an epoch's end: a stop that waited for `min_epochs` / `min_steps` is taken once they are
        done (every rank alike: the stop was agreed, the counts are the same on every rank)."""
        if self.context.stop_waits and self._minimum_done():
            self.context.stop_waits = False
            self.stop(agreed=True, limit=True)

    @property
    def callbacks(self) -> list[Callback]:
        """The fit's callbacks: those given, the defaults, the module's own (`configure_callbacks`) once an entry
        point merged them, and the `LoggerBridge`."""
        return self._callbacks

    @callbacks.setter
    def callbacks(self, value: Sequence[Callback]) -> None:
        callbacks = arguments.check_callbacks(value, Callback)
        check_state_keys(callbacks)
        self._callbacks[:] = callbacks

    @property
    def should_stop(self) -> bool:
        """Lightning's stop flag: whether a stop of the fit is asked for (under DDP, this rank's request until the
        ranks agree). Setting it True (from a callback or the module) is `stop()`."""
        return self.session.should_stop()

    @should_stop.setter
    def should_stop(self, value: bool) -> None:
        self.session.set_should_stop(value)

    def merge_module_callbacks(self, module: LoopModule) -> None:
        """Add the callbacks of `module.configure_callbacks()` to `callbacks` by Lightning's rule (a module's callback
        replaces the given ones of its type; checkpointing callbacks go last). Each entry point does it."""
        self.callbacks = with_module_callbacks(self._callbacks, module)

    def publish(self, values: Mapping[str, Any]) -> None:
        """Send `values` to `logged_metrics` and the loggers at the current global step (read from the device
        here); callbacks that compute their own values (timing, memory) publish them here."""
        self.metrics.publish(values)

    def checkpoint_objects(self, weights_only: bool = False) -> dict[str, Any]:
        """What a checkpoint of this run holds: the module, optimizers, LR schedulers, the train engine's state and
        the Trainer's own (global step, callbacks); give it to `Checkpoint(to_save=...)`. `weights_only`: the module's
        weights and what `load_from_checkpoint` rebuilds it from, nothing a fit resumes from."""
        return self.checkpoints.objects(weights_only=weights_only)

    def save_checkpoint(self, filepath: str | os.PathLike, weights_only: bool = False) -> None:
        """Lightning's: the run's checkpoint at `filepath` now, as a `ModelCheckpoint` writes one (committed, with the
        `on_save_checkpoint` hooks), for `load_from_checkpoint` and `fit(ckpt_path=...)`; `weights_only`: the module's
        weights, class and hparams only (loads back, does not resume). Call it on every rank."""
        self.checkpoints.save(self.context, filepath, self.session.save_hooks, weights_only=weights_only)

    @property
    def checkpoint_callback(self) -> Checkpointer | None:
        """Lightning's: the first checkpointing callback (`ModelCheckpoint`: `best_model_path`, ...), or None."""
        return self.checkpoints.first

    @property
    def checkpoint_callbacks(self) -> list[Checkpointer]:
        """Lightning's: every checkpointing callback (`ModelCheckpoint`s), in the order they save."""
        return self.checkpoints.checkpointers

    @property
    def checkpoint_directories(self) -> list[str]:
        """Where this run's checkpoints go: each checkpointing callback's `dirpath` (default `default_root_dir/
        checkpoints`); a resume looks there for the newest complete one."""
        return self.checkpoints.directories()

    def checkpoint_committed(self, path: str, step: int | None = None) -> None:
        """A checkpoint callback committed `path`, taken at global step `step`: loggers that keep checkpoints
        upload it."""
        self.logger_bridge.checkpoint_saved(path, step)

    def log_artifact(self, path: str, artifact_path: str | None = None) -> None:
        """Send the file `path` to every tracker of the fit's runs, under `artifact_path` (rank 0, runs open)."""
        self.logger_bridge.log_artifact(path, artifact_path, self.global_step)

    def persist_logs(self) -> None:
        """Make what the loggers hold durable before a checkpoint commits (see `LoggerBridge.persist`): a run
        killed after that commit resumes past these steps and would never log them again."""
        self.logger_bridge.persist()

    def check_finite(self) -> None:
        """Act on the losses seen since the last check as `Trainer(nonfinite=...)` says (a host-device sync; every
        rank must call it at the same point). The Trainer checks at each log step, each epoch end and each save."""
        self.nonfinite_watch.check(self.checkpoints.newest_before)

    def decisions(self) -> list[Decision]:
        """The Trainer's own decisions at the boundaries (see `tracktrain.distributed.boundary`): under DDP, a stop any rank
        asked for during the epoch is everyone's at its end."""
        return self.session.decisions()

    # ------------------------------------------------------------------------------------------ entry points
    def fit(
        self,
        model: LoopModule | nn.Module | ModelEngine,
        train_dataloaders: Iterable[Any] | None = None,
        val_dataloaders: Iterable[Any] | None = None,
        ckpt_path: str | os.PathLike | None = None,
        datamodule: DataModule | None = None,
        *,
        optimizer: torch.optim.Optimizer | None = None,
        criterion: Callable | None = None,
        lr_scheduler: Any = None,
    ) -> None:
        """Train `model` (a `LoopModule`) on `train_dataloaders`, validating on `val_dataloaders` (or on a
        `datamodule`'s loaders, or on the module's own `train_dataloader()`/`val_dataloader()`); resume from
        `ckpt_path`: a path or URL, or "last" (the newest complete checkpoint of the run). Without it,
        `Trainer(resume=...)` decides; with neither, a fit is a new run (step and epoch counters start at 0), but after
        a fit of this Trainer that stopped early (EarlyStopping, `should_stop`) it continues that one's counters, and
        after one that reached `max_epochs`/`max_steps` it trains nothing, as Lightning's.
        Lightning's names: `fit(model=..., train_dataloaders=..., datamodule=..., ckpt_path=...)`.

        `model` may also be a plain `nn.Module` (with `optimizer=` and `criterion=`) or a `ModelEngine` from
        `tracktrain.initialize`: it is then trained as a `SupervisedModule` on `(inputs, targets)` batches.
        """
        module = as_loop_module(model, optimizer, criterion, lr_scheduler)
        if ckpt_path is not None:
            ckpt_path = arguments.check_location(
                "Trainer.fit(ckpt_path=...)", ckpt_path, 'a checkpoint file\'s path or URL, or "last"'
            )
        if val_dataloaders is not None and type(module).eval_step is LoopModule.eval_step:
            warnings.warn(  # as Lightning: "You passed in a val_dataloader but have no validation_step"
                f"fit() got val_dataloaders, but {type(module).__name__} defines no eval_step(self, batch, batch_idx): "
                "the fit trains without validating. Define eval_step to validate.",
                stacklevel=2,
            )
            val_dataloaders = None
        data = StageData("fit", module, datamodule, {"fit": train_dataloaders, "validate": val_dataloaders})
        last_fit_end = self._last_fit_end() if ckpt_path is None else None
        self.context.start_next_fit()
        self.context.last_fit_end = last_fit_end
        self._last_fit_stopped = False
        self.session.fit(self.context, module, data, ckpt_path)
        self._last_fit_stopped = self.should_stop  # ended by a stop (EarlyStopping, should_stop), not by an error

    def _last_fit_end(self) -> str | None:
        """How this Trainer's last fit ended, for the next one (Lightning's rule: a Trainer counts its epochs and steps
        across fits): "limit" (max_epochs / max_steps reached: the next fit sets up, so that the module given becomes
        the Trainer's, and trains nothing), "stopped" (a stop before the limit, whose state is complete: the next fit
        continues its counters), None (no fit, or one that failed: the next is a new run)."""
        state = self.train_engine.state
        if not state.iteration:
            return None
        epochs_done = state.iteration // state.epoch_length if state.epoch_length else state.epoch
        if (self.max_epochs is not None and epochs_done >= self.max_epochs) or (
            self.max_steps is not None and self.global_step >= self.max_steps
        ):
            return "limit"
        return "stopped" if self._last_fit_stopped else None

    def validate(
        self,
        model: LoopModule | None = None,
        dataloaders: Data = None,
        ckpt_path: Ckpt = None,
        verbose: bool = True,
        datamodule: Any = None,
    ) -> list[dict[str, float]]:
        """Run `eval_step` over `dataloaders` (or `datamodule`'s, or the module's `val_dataloader()`) with the weights
        of `ckpt_path`: "best", "last", a path or URL; None: as they are. Returns `[{metric: value}]`, one dict per
        loader; `verbose`: also printed as a table (Lightning's arguments, in its order)."""
        return self._evaluate("validate", model, dataloaders, ckpt_path, verbose, datamodule)

    def test(
        self,
        model: LoopModule | None = None,
        dataloaders: Data = None,
        ckpt_path: Ckpt = None,
        verbose: bool = True,
        datamodule: Any = None,
    ) -> list[dict[str, float]]:
        """Run `test_step` over `dataloaders` (or `datamodule`'s, or the module's `test_dataloader()`) with the weights
        of `ckpt_path` (as `validate`'s); returns `[{metric: value}]` (also in `callback_metrics`), and with `verbose`
        prints them."""
        return self._evaluate("test", model, dataloaders, ckpt_path, verbose, datamodule)

    def _evaluate(
        self, stage: str, model: LoopModule | None, dataloaders: Data, ckpt_path: Ckpt, verbose: bool, datamodule: Any
    ) -> list[dict[str, float]]:
        arguments.check_bool(f"{stage}(verbose=...)", verbose)
        results = self.session.evaluate(stage, model, dataloaders, datamodule, ckpt_path)
        if verbose:
            print_results(stage, results)
        return results

    def predict(
        self,
        model: LoopModule | None = None,
        dataloaders: Data = None,
        datamodule: Any = None,
        return_predictions: bool | None = None,
        ckpt_path: Ckpt = None,
    ) -> list[Any] | None:
        """Run `predict_step` over `dataloaders` (or `datamodule`'s, or the module's `predict_dataloader()`) with the
        weights of `ckpt_path` (as `validate`'s); returns the outputs, one per batch (Lightning's arguments, in its
        order; `return_predictions=False`: None, the outputs not kept)."""
        if return_predictions is not None:
            arguments.check_bool("predict(return_predictions=...)", return_predictions)
        predictions = self.session.predict(model, dataloaders, datamodule, ckpt_path)
        return None if return_predictions is False else predictions

    def train_epoch_length(self) -> int | None:
        """The batches of one training epoch of the fit under way (None: its loader has no length)."""
        return self.session.train_loader()[1]

    def reload_loaders(self) -> None:
        """An epoch starts: the loaders reloaded when `reload_dataloaders_every_n_epochs` says."""
        self.session.reload_loaders()

    def loader_for(self, loader: Iterable[Any], shuffle_default: bool) -> Iterable[Any]:
        """`loader` as the strategy reads it (this process's shard under DDP), made once per entry point."""
        return self.session.loader_for(loader, shuffle_default)

    # ------------------------------------------------------------------------------------------ evaluation
    def reduce_epoch(self, stage: str, engine: Engine) -> None:
        """A stage's epoch ended: act on its losses (training), gather its values."""
        extra: dict[str, Any] = {}
        if stage == "fit":
            self.check_finite()
            model_engine = self.running_model_engine
            if model_engine.scaler is not None:  # steps skipped for inf/NaN gradients, so far (on the device)
                extra["amp/skipped_steps"] = model_engine.skipped_steps_on_device
        self.metrics.reduce_epoch(stage, engine, extra)


if TYPE_CHECKING:  # what extensions and modules are typed against is the Trainer's: mypy checks it here
    _CONFORMS: type[ModuleHost] = Trainer
