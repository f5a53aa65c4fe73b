"""`Session`: how each of a Trainer's entry points (fit, validate, test, predict) runs — set up in the strategy's
order, its handlers attached, its body run, and everything detached again whatever happens.

The set-up follows the Strategy's fixed order (see `docs/architecture.md`): the environment, then the module
(prepared, then wrapped before its optimizers are built), then the optimizers and the model engine that steps them.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import torch

from tracktrain.distributed.boundary import Boundary, Decision
from tracktrain.distributed.logger import get_dist_logger
from tracktrain.distributed.lost_ranks import lost_peers_line
from tracktrain.engine.combined_loader import CombinedLoader
from tracktrain.engine.deterministic import ResumableEngine
from tracktrain.engine.events import RemovableEventHandle
from tracktrain.engine.model_engine import ModelEngine
from tracktrain.rng import manual_seed
from tracktrain.trainer import arguments
from tracktrain.trainer.accumulation import AccumulationSchedule, schedule_of
from tracktrain.trainer.batches import combined_for_training, epoch_length_of
from tracktrain.trainer.building import configure_optimizers, model_engine_for
from tracktrain.trainer.callback import CallbackPhase
from tracktrain.trainer.datamodule import StageData
from tracktrain.trainer.fit_context import FitContext
from tracktrain.trainer.hooks import TrainerEvents, hook_handlers
from tracktrain.trainer.lightning_names import check_lightning_methods
from tracktrain.trainer.model_preparation import prepare_module
from tracktrain.trainer.module import LoopModule
from tracktrain.trainer.quick_checks import first_batches
from tracktrain.trainer.run_order import ExceptionHooks, hook_targets
from tracktrain.trainer.sanity_check import run_sanity_check
from tracktrain.trainer.scaled_optimizer import ScaledOptimizer
from tracktrain.trainer.stage_checkpoint import load_stage_checkpoint
from tracktrain.trainer.surface import ModuleHost  # the base of the Protocol below: needed at run time

if TYPE_CHECKING:
    from tracktrain.engine.engine import Engine
    from tracktrain.trainer.evaluation import EvaluationStages
    from tracktrain.trainer.fit_step import FitStep
    from tracktrain.trainer.metric_log import MetricLog
    from tracktrain.trainer.metrics_hub import MetricsHub
    from tracktrain.trainer.nonfinite import NonFiniteWatch
    from tracktrain.trainer.preemption_control import PreemptionControl
    from tracktrain.trainer.run_checkpoints import RunCheckpoints
    from tracktrain.trainer.run_order import RunOrder
    from tracktrain.trainer.trainer_state import TrainerState
    from tracktrain.trainer.training_time import TrainingTime

__all__ = ["Ckpt", "Data", "Session"]

# the arguments of Trainer.validate/test/predict, named so that their signatures stay on one line
Data = Iterable[Any] | None  # dataloaders
Ckpt = (
    str | os.PathLike | None
)  # ckpt_path: "best", "last", a checkpoint's path or URL, or None (the weights as they are)


class TrainerForSession(ModuleHost, Protocol):
    """What the entry points read of their Trainer: what the module (attached to it) reads, and the fit's context,
    parts (its run's order, checkpoints, step, evaluations, values' hub), precision, limits, watches and sanity
    check's batches."""

    @property
    def module(self) -> LoopModule | None: ...
    @property
    def context(self) -> FitContext: ...
    @property
    def detect_anomaly(self) -> bool: ...
    @property
    def reload_dataloaders_every_n_epochs(self) -> int: ...
    @property
    def checkpoints(self) -> RunCheckpoints: ...
    @property
    def model_engine(self) -> ModelEngine | None: ...
    @property
    def nonfinite_watch(self) -> NonFiniteWatch: ...
    @property
    def training_time(self) -> TrainingTime: ...
    @property
    def overfit_batches(self) -> int | float | None: ...
    @property
    def num_sanity_val_steps(self) -> int: ...
    @property
    def autocast_dtype(self) -> torch.dtype | None: ...
    @property
    def param_dtype(self) -> torch.dtype | None: ...
    @property
    def resume(self) -> str | None: ...
    @property
    def preemption_timeout(self) -> float: ...
    @property
    def state(self) -> TrainerState: ...
    def merge_module_callbacks(self, module: LoopModule) -> None: ...
    @property
    def run_order(self) -> RunOrder: ...
    @property
    def engines(self) -> dict[str, Engine]: ...
    @property
    def fit_step(self) -> FitStep: ...
    @property
    def evaluation(self) -> EvaluationStages: ...
    @property
    def metrics(self) -> MetricsHub: ...
    @property
    def logs(self) -> dict[str, MetricLog]: ...
    @property
    def preemption(self) -> PreemptionControl: ...


class Session:
    """The entry points of `trainer`, and what lasts one entry point: the loaders as the strategy reads them (made
    once each) and whether a stop was asked for (under DDP, agreed at the epoch's end: `Trainer.stop`)."""

    def __init__(self, trainer: TrainerForSession) -> None:
        self._trainer = trainer
        self._distributed_loaders: dict[tuple[int, int], Iterable[Any]] = {}
        self.stop_requested = False
        self._fit_loader: Iterable[Any] | None = None  # the training loader given to the fit under way
        self._fit_data: StageData | None = None  # where the fit under way takes its loaders (to reload them)
        self._first_epoch = 0  # the epoch the fit under way started (or resumed) at
        # it as read, its epoch length, and the seed it was sharded with
        self._train: tuple[Iterable[Any], int | None, int | None] | None = None
        self.attached_stages: frozenset[str] = frozenset()  # the stages whose hooks the entry points under way attached

    # ------------------------------------------------------------------------------------------ entry points
    def fit(self, context: FitContext, module: LoopModule, data: StageData, ckpt_path: str | None) -> None:
        """`Trainer.fit` once its arguments are checked, in the order a fit runs: set up (`run`: environment, data,
        module, optimizers, handlers), resume or start the run, the sanity check, the training engine's epochs (what
        each step, epoch end and validation does: `run_order`), then tear the strategy down. `context`: the fit's
        state, new for this fit."""
        trainer = self._trainer
        self._train = None
        self._fit_data = data

        def run() -> None:
            if (
                epoch_length_of("limit_train_batches", combined_for_training(data.loader("fit")), trainer.limits["fit"])
                == 0
            ):
                return  # nothing to train
            if context.last_fit_end == "limit":
                get_dist_logger().info(
                    f"Trainer.fit stopped: this Trainer's previous fit reached its limit (max_epochs="
                    f"{trainer.max_epochs}, max_steps={trainer.max_steps}), as in Lightning. A new Trainer trains a "
                    'new run; fit(ckpt_path="last") with a larger max_epochs continues the last one.'
                )
                return
            trainer.checkpoints.start_run(context, ckpt_path if ckpt_path is not None else trainer.resume, module)
            if trainer.checkpoints.already_finished():
                return
            trainer.train_engine.fire_event(TrainerEvents.FIT_STARTED)
            loader, epoch_length = self.train_loader()
            self._first_epoch = trainer.current_epoch
            trainer.preemption.start(trainer.preemption_timeout)
            try:
                run_sanity_check(
                    context,
                    context.val_dataloaders,
                    trainer.num_sanity_val_steps,
                    trainer.train_engine,
                    trainer.metrics,
                    trainer.evaluation,
                )
                context.fitting = True
                trainer.training_time.start()
                # Lightning's detect_anomaly: autograd checks each backward for the op that made a NaN (slow)
                anomaly = torch.autograd.detect_anomaly() if trainer.detect_anomaly else contextlib.nullcontext()
                with anomaly:
                    trainer.train_engine.run(
                        loader,
                        max_epochs=self._max_epochs(epoch_length),
                        epoch_length=epoch_length,
                        seed=context.run_seed,
                    )
            finally:
                trainer.training_time.pause()
                context.fitting = False
                trainer.preemption.stop()
            trainer.train_engine.fire_event(TrainerEvents.FIT_COMPLETED)
            trainer.strategy.teardown()

        try:
            self.run(context, module, "fit", run, data)
        finally:
            self._fit_loader, self._train, self._fit_data = None, None, None

    def train_loader(self) -> tuple[Iterable[Any], int | None]:
        """The fit's training loader as the strategy reads it (its first batches with `overfit_batches`), and its
        epoch length after `limit_train_batches`; made once per fit and seed (one asked for in `configure_optimizers`,
        before the run's seed is known, is made again with it)."""
        trainer = self._trainer
        if self._fit_loader is None:
            raise RuntimeError("The training loader is known once fit() starts (in configure_optimizers and hooks).")
        seed = trainer.context.run_seed
        if self._train is None or self._train[2] != seed:
            given = combined_for_training(self._fit_loader)
            if trainer.overfit_batches:  # the same first batches every epoch (of each loader, for several)
                count = trainer.overfit_batches
                given = (
                    given.map(lambda loader: first_batches(loader, count))
                    if isinstance(given, CombinedLoader)
                    else first_batches(given, count)
                )
            loader = self.loader_for(given, shuffle_default=True)
            self._train = loader, epoch_length_of("limit_train_batches", loader, trainer.limits["fit"]), seed
        return self._train[0], self._train[1]

    def reload_loaders(self) -> None:
        """An epoch starts: every `reload_dataloaders_every_n_epochs` epochs, the loaders the module's or datamodule's
        methods give are asked for again (the first epoch of a fit, or of a resumed one, read them at its start)."""
        trainer, every = self._trainer, self._trainer.reload_dataloaders_every_n_epochs
        epoch = trainer.current_epoch
        if not every or epoch % every or epoch == self._first_epoch or self._fit_data is None:
            return
        train = self._fit_data.reload("fit")
        if train is not None:
            self._fit_loader, self._train = train, None
            loader, epoch_length = self.train_loader()
            engine = trainer.train_engine
            assert isinstance(engine, ResumableEngine)  # the Trainer's
            engine.replace_data(loader, epoch_length)
        validation = self._fit_data.reload("validate")
        if validation is not None:
            trainer.context.val_dataloaders = validation

    def estimated_stepping_batches(self) -> int | float:
        """`Trainer.estimated_stepping_batches`: the optimizer steps the fit will take in all (from its start, also
        when it resumes), as Lightning counts them: `max_steps`, or the epochs' steps when fewer; inf when the loader
        has no length and no `max_steps` bounds it."""
        trainer = self._trainer
        _, epoch_length = self.train_loader()
        limit = trainer.max_steps if trainer.max_steps is not None else math.inf
        if epoch_length is None or trainer.max_epochs is None:
            return limit
        epochs = self._accumulation.steps(epoch_length, trainer.max_epochs)
        return min(epochs, limit)

    def evaluate(
        self, stage: str, module: LoopModule | None, loader: Any, datamodule: Any, ckpt_path: Ckpt = None
    ) -> list[dict[str, float]]:
        """`Trainer.validate` or `Trainer.test`: the weights of `ckpt_path` loaded (`stage_checkpoint`), then one pass
        of `stage` over its loader; its epoch's values."""
        module = self._module_for(stage, module)
        load_stage_checkpoint(self._trainer.checkpoints, stage, module, ckpt_path)
        data = StageData(stage, module, datamodule, {stage: loader})
        if not (stage == "test" and type(module).test_step is not LoopModule.test_step):
            arguments.require_override(module, "eval_step", stage)
        values: dict[str, Any] = {}

        def run() -> None:
            values.update(self._trainer.evaluation.run(stage, data.loader(stage)))

        self.run(self._trainer.context, module, stage, run, data)
        return self._trainer.evaluation.results(values)  # one dict per loader, as Lightning

    def predict(self, module: LoopModule | None, loader: Any, datamodule: Any, ckpt_path: Ckpt = None) -> list[Any]:
        """`Trainer.predict`: the weights of `ckpt_path` loaded, then one pass over its loader; the outputs, one per
        batch."""
        trainer = self._trainer
        module = self._module_for("predict", module)
        load_stage_checkpoint(trainer.checkpoints, "predict", module, ckpt_path)
        data = StageData("predict", module, datamodule, {"predict": loader})
        evaluation = trainer.evaluation
        evaluation.predictions = []
        self.run(trainer.context, module, "predict", lambda: evaluation.run("predict", data.loader("predict")), data)
        predictions, evaluation.predictions = evaluation.predictions, []
        return predictions

    def run(
        self, context: FitContext, module: LoopModule, outermost: str, body: Callable[[], object], data: StageData
    ) -> None:
        """Set up `context` (the data included), attach, `body()`, and detach whatever happens; `on_exception` hooks
        see any failure once; the data's `teardown` hooks end it."""
        trainer = self._trainer
        handles: list[RemovableEventHandle] = []
        exception_hooks: ExceptionHooks | None = None
        outer_stages = self.attached_stages
        if not outer_stages:  # not an entry point called inside another's hooks
            trainer.metrics.start_over()
        try:
            self._setup(context, module, data)
            val_loader = context.val_dataloaders if outermost == "fit" else None
            stages = {outermost} | ({"validate"} if val_loader is not None else set())
            handles, exception_hooks = trainer.run_order.attach(trainer, stages, outermost, val_loader)
            self.attached_stages = outer_stages | stages
            body()
        except BaseException as exception:
            lost = lost_peers_line(exception, trainer.strategy.global_rank) if trainer.strategy.is_distributed else None
            if lost is not None:  # before any hook: the one line a survivor's log must have, then the traceback
                get_dist_logger().error(lost)
                exception.add_note(lost)
            if exception_hooks is not None:
                exception_hooks.notify(trainer.engines[outermost], exception)
            raise
        finally:
            self.attached_stages = outer_stages
            try:
                self._teardown(handles)
            finally:
                data.teardown()

    @contextlib.contextmanager
    def save_hooks(self, module: LoopModule) -> Iterator[None]:
        """The module's and callbacks' `on_save_checkpoint` hooks attached for one save (`Trainer.save_checkpoint`),
        in a fit's order (by phase; within one, the module first, then the callbacks in order), unless a fit under way
        attached them."""
        trainer = self._trainer
        if "fit" in self.attached_stages:
            yield
            return
        phases = list(CallbackPhase)
        # stable: within a phase, the module first, then the callbacks in their order
        targets = sorted(hook_targets(trainer, module, trainer.callbacks), key=lambda target: phases.index(target[3]))
        handles = [
            trainer.train_engine.add_event_handler(event, handler)
            for target, base, leading, _ in targets
            for _, event, handler in hook_handlers(target, base, leading, {"fit"})
            if event is TrainerEvents.CHECKPOINT_SAVING
        ]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    def decisions(self) -> list[Decision]:
        """`Trainer.decisions`: under DDP, a stop any rank asked for during the epoch (`stop_requested`) is everyone's
        at its end; with `max_time`, whether the run has trained that long, at each step's end."""
        trainer = self._trainer
        decisions = trainer.training_time.decisions(
            lambda: trainer.global_step, lambda: trainer.stop(agreed=True, limit=True)
        )
        if trainer.strategy.is_distributed:
            decisions.append(
                Decision(
                    Boundary.TRAIN_EPOCH_END,
                    "stop requested",
                    propose=lambda: self.stop_requested,
                    agree="any",
                    act=self._stop_if_agreed,
                )
            )
        return decisions

    def should_stop(self) -> bool:
        """`Trainer.should_stop`: a stop asked for this fit, not yet acted on by every rank (or under way)."""
        engine = self._trainer.train_engine
        return bool(self.stop_requested or engine.should_terminate or engine.should_terminate_single_epoch)

    def set_should_stop(self, value: bool) -> None:
        """`trainer.should_stop = value`: True is `Trainer.stop()` (one stop decision, agreed by every rank); False
        withdraws nothing during a fit (the stop may be under way on other ranks), so it is refused then."""
        if not isinstance(value, bool):
            raise TypeError(f"trainer.should_stop must be True or False, got {value!r}.")
        if value:
            self._trainer.stop()
        elif self._trainer.context.fitting and self.should_stop():
            raise RuntimeError(
                "trainer.should_stop = False: a stop asked for during this fit cannot be withdrawn (it may already be "
                "under way on other ranks). Set should_stop = True only once the fit must stop."
            )

    def _stop_if_agreed(self, agreed: float) -> None:
        self.stop_requested = False
        if agreed:
            self._trainer.stop(agreed=True)  # at the epoch's end (waiting for min_epochs / min_steps if not done)

    def loader_for(self, loader: Iterable[Any], shuffle_default: bool) -> Iterable[Any]:
        """`loader` as the strategy reads it (this process's shard under DDP, shuffled by the run's seed), made once
        per entry point and seed: one asked for before the fit's seed is known (`estimated_stepping_batches` in
        `configure_optimizers`) is made again with it."""
        seed = self._trainer.context.run_seed or 0
        key = (id(loader), seed)
        if key not in self._distributed_loaders:
            distribute = self._trainer.strategy.distribute
            if isinstance(loader, CombinedLoader):  # each of its loaders sharded, read together for their batches
                read: Iterable[Any] = loader.map(lambda inner: distribute(inner, shuffle_default, seed)).batches()
            else:
                read = distribute(loader, shuffle_default, seed)
            self._distributed_loaders[key] = read
        return self._distributed_loaders[key]

    def _module_for(self, stage: str, module: LoopModule | None) -> LoopModule:
        if module is None:
            if self._trainer.module is None:
                raise ValueError(f"Trainer.{stage}() needs a module: pass one, or call fit() first.")
            return self._trainer.module
        if not isinstance(module, LoopModule):
            raise TypeError(f"Trainer.{stage}(module=...) needs a LoopModule, got {type(module).__name__}.")
        return module

    # --------------------------------------------------------------------------------------- set-up / tear-down
    def _setup(self, context: FitContext, module: LoopModule, data: StageData) -> None:
        """The strategy's order: environment, then the data (`prepare_data` needs the process group), then the
        module (wrapped before its optimizers are built), then the optimizers and the model engine that steps them;
        what it makes goes into `context`."""
        trainer = self._trainer
        training = data.entry == "fit"
        strategy = trainer.strategy
        context.device = strategy.setup_environment(context.device)
        self._distributed_loaders = {}
        self.stop_requested = False
        if trainer.seed is not None:
            manual_seed(trainer.seed)
        check_lightning_methods(module, LoopModule)
        module.trainer = trainer
        context.module, context.datamodule = module, data.datamodule
        data.setup(trainer)  # prepare_data, setup(stage), then the loaders (configure_optimizers may ask for them)
        if training:
            self._fit_loader, context.val_dataloaders = data.loader("fit"), data.loader("validate")
        trainer.merge_module_callbacks(module)
        # the batches per optimizer step (the Trainer's, or a GradientAccumulationScheduler's): known before
        # configure_optimizers, which may ask for estimated_stepping_batches
        context.accumulation = schedule_of(trainer.accumulate_grad_batches, trainer.callbacks)
        module.to(context.device)
        if trainer.param_dtype is not None:  # a "true" precision: the weights in its dtype, before the optimizers
            module.to(dtype=trainer.param_dtype)
        prepare_module(module, trainer.activation_checkpointing, trainer.compile, strategy.compile_blocks(module))
        if training:
            train_forward = strategy.setup_module(module, trainer.autocast_dtype)
            context.optimizers, context.lr_scheduler_configs = configure_optimizers(module)
            trainer.nonfinite_watch.reset()
            model_engine = context.model_engine = model_engine_for(
                module,
                context.optimizers,
                strategy,
                context.device,
                autocast_dtype=trainer.autocast_dtype,
                param_dtype=trainer.param_dtype,
                gradient_clip_val=trainer.gradient_clip_val,
                gradient_clip_algorithm=trainer.gradient_clip_algorithm,
            )
            model_engine.attach(trainer.train_engine)
            context.manual_optimizers = list(context.optimizers)
            if model_engine.scaler is not None and not module.automatic_optimization:
                context.manual_optimizers = [ScaledOptimizer(opt, model_engine) for opt in context.optimizers]
            strategy.check_schedule(
                trainer.max_epochs,
                trainer.max_steps,
                [config.interval for config in context.lr_scheduler_configs],
                context.accumulation.accumulates,
            )
            trainer.fit_step.setup(
                train_forward,
                trainer.train_engine,
                trainer.state,
                trainer.metrics,
                max_steps=trainer.max_steps,
                log_every_n_steps=trainer.log_every_n_steps,
                param_dtype=trainer.param_dtype,
            )
            strategy.setup_recovery(trainer.checkpoints.objects())
        elif context.model_engine is None or context.model_engine.model is not module:
            context.model_engine = ModelEngine(
                module,
                autocast_dtype=trainer.autocast_dtype,
                param_dtype=trainer.param_dtype,
                device_type=context.device.type,
            )

    def _max_epochs(self, epoch_length: int | None) -> int:
        trainer = self._trainer
        if trainer.max_epochs is not None:
            return trainer.max_epochs
        if epoch_length is None or trainer.max_steps is None:
            return 2**62  # max_steps or max_time stops the run (an unsized loader never says how many epochs that is)
        return self._accumulation.epochs_for(trainer.max_steps, epoch_length)

    @property
    def _accumulation(self) -> AccumulationSchedule:
        schedule = self._trainer.context.accumulation
        return schedule if schedule is not None else schedule_of(self._trainer.accumulate_grad_batches, [])

    def _teardown(self, handles: list[RemovableEventHandle]) -> None:
        trainer = self._trainer
        for handle in handles:
            handle.remove()
        trainer.preemption.detach()
        trainer.fit_step.teardown()
        if trainer.model_engine is not None:
            trainer.model_engine.detach()
        trainer.metrics.leave_stage(trainer.logs["fit"])
