"""The order of a Trainer's run: at each event of its engines, what the Trainer does and where the module's and
the callbacks' hooks run — written once, top to bottom, as a fit goes (`_Plan.plan`).

Each entry point (fit, validate, test, predict) attaches, in this order, one handler per piece of work and per
overridden hook; an Engine runs the handlers of one event in the order they were attached (Ignite's rule), so the
order written here is the order that runs. Hooks run at their callback's `CallbackPhase`: with the module's own
hooks by default (the module first, then the callbacks in the order given to the Trainer), or at the phases
before and after the Trainer's own work that metrics, checkpoints and printers need. Everything is removed when
the entry point returns. Ignite handlers a user attaches to an engine run with Ignite's semantics, before what
the Trainer attaches for its run (they were attached first).
"""

from __future__ import annotations

import functools
import warnings
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tracktrain.distributed.boundary import Boundary, Decision, decide
from tracktrain.engine.deterministic import ResumableEngine
from tracktrain.engine.events import Events, RemovableEventHandle
from tracktrain.engine.handler_registry import event_key
from tracktrain.trainer.callback import Callback, CallbackPhase
from tracktrain.trainer.hooks import TrainerEvents, batch_index, hook_handlers
from tracktrain.trainer.module import LoopModule

if TYPE_CHECKING:
    from tracktrain.engine.engine import Engine
    from tracktrain.trainer.evaluation import EvaluationStages
    from tracktrain.trainer.fit_context import FitContext
    from tracktrain.trainer.fit_step import FitStep
    from tracktrain.trainer.metrics_hub import MetricsHub
    from tracktrain.trainer.preemption_control import PreemptionControl
    from tracktrain.trainer.strategies.base import Strategy
    from tracktrain.trainer.surface import TrainerSurface

__all__ = ["ExceptionHooks", "RunOrder", "RunOrderSettings", "hook_targets", "phase_of"]

FIRST, METRICS, HOOKS, AFTER_DECISIONS, LAST = CallbackPhase  # the callbacks' places in the order, by phase
PREEMPTION_EXCHANGE_EVERY = 8  # steps between exchanges of the pre-emption flag under DDP

# One step of the order at an event: the callbacks of a phase, a piece of the Trainer's work (a handler), the
# same on an event with a filter (`(Events.EPOCH_COMPLETED(every=2), handler)`), or nothing (work not needed).
Step = CallbackPhase | Callable | tuple[Any, Callable] | None


class TrackerRuns(Protocol):
    """The trackers' runs, as the run's order starts and ends them (`tracktrain.loggers.bridge.LoggerBridge`)."""

    def start_runs(self, trainer: TrainerSurface, module: LoopModule) -> None: ...
    def flush_runs(self) -> None: ...
    def finish_runs(self, module: LoopModule) -> None: ...
    def fail_runs(self, exception: BaseException) -> None: ...
    def start_entry_runs(self, trainer: TrainerSurface) -> None: ...
    def finish_entry_runs(self) -> None: ...


@dataclass(frozen=True)
class RunOrderSettings:
    """The Trainer's settings the run's order reads, as each entry point attaches it (they may change between fits):
    when validation is due, the minimum a stop waits for, and how often the loaders are reloaded."""

    val_every_n_epochs: int
    val_check_interval: int | float | None
    min_epochs: int | None
    min_steps: int | None
    reload_dataloaders_every_n_epochs: int


class ExceptionHooks:
    """The `on_exception` hooks of a run, called once per exception, which is then raised on; then, in a fit, the
    trackers' runs end (`last`), whatever the hooks did.

    Attached last to the outermost engine's EXCEPTION_RAISED, so that no other handler can swallow the error;
    the Engine reports an exception from inside an epoch twice, and a failure outside the engine (loading a
    checkpoint) not at all, so the entry point also calls `notify` and the identity check keeps it to once.
    """

    def __init__(self, hooks: list[Callable], last: Callable | None = None) -> None:
        self.hooks, self.last = hooks, last
        self._seen: BaseException | None = None

    def notify(self, engine: Engine, exception: BaseException) -> None:
        """Call every hook. One that fails (a tracker that cannot mark its run) is reported as a warning and the
        others still run: the exception being raised is the one the user must see, not a consequence of it. `last`
        runs even when a hook is interrupted (a second Ctrl-C while a checkpoint commits): no run is left open."""
        if exception is self._seen:
            return
        self._seen = exception
        try:
            for hook in self.hooks:
                self._call(hook, engine, exception)
        finally:
            if self.last is not None:
                self._call(self.last, engine, exception)

    @staticmethod
    def _call(hook: Callable, engine: Engine, exception: BaseException) -> None:
        try:
            hook(engine, exception)
        except Exception as hook_error:  # noqa: BLE001 - reported, never raised over the run's own error
            warnings.warn(
                f"An on_exception hook ({getattr(hook, '__qualname__', hook)}) failed while the run was "
                f"stopping on {type(exception).__name__}: {type(hook_error).__name__}: {hook_error}",
                stacklevel=3,
            )

    def __call__(self, engine: Engine, exception: BaseException) -> None:
        self.notify(engine, exception)
        raise exception


class RunOrder:
    """The run's order of one Trainer, built with the parts whose work it orders; `attach` plans what an entry point
    attaches and attaches it.

    Args:
        context: the fit's (its module, validation loader, LR schedulers, accumulation; whether it trains).
        callbacks: the Trainer's one list: whose hooks run, and the decisions they declare.
        strategy: whether ranks step in lockstep; the exchange of the decisions.
        engines: the stages' engines, by name.
        metrics: the values' hub (each stage's logs, published per step and per epoch).
        evaluation: the validation, test and predict passes.
        fit_step: the training step (its last accumulation window, its epoch's LR schedulers).
        preemption: its check, exchanged every few steps when ranks step in lockstep.
        runs: the trackers' runs, started and ended with the entry points.
        settings: the Trainer's settings as they are now (`RunOrderSettings`).
        decisions: the Trainer's own decisions at the boundaries.
        reduce_epoch: a stage's epoch ended (`Trainer.reduce_epoch`).
        reload_loaders: an epoch starts: the loaders reloaded when due.
        take_a_stop_that_waited: a stop that waited for min_epochs / min_steps, taken once they are done.
    """

    def __init__(
        self,
        context: FitContext,
        callbacks: list[Callback],
        strategy: Strategy,
        engines: dict[str, Engine],
        metrics: MetricsHub,
        evaluation: EvaluationStages,
        fit_step: FitStep,
        preemption: PreemptionControl,
        runs: TrackerRuns,
        *,
        settings: Callable[[], RunOrderSettings],
        decisions: Callable[[], list[Decision]],
        reduce_epoch: Callable[[str, Engine], None],
        reload_loaders: Callable[[], None],
        take_a_stop_that_waited: Callable[[], None],
    ) -> None:
        self._context, self._callbacks, self._strategy, self._engines = context, callbacks, strategy, engines
        self._metrics, self._evaluation, self._fit_step, self._preemption = metrics, evaluation, fit_step, preemption
        self._runs, self._settings, self._decisions = runs, settings, decisions
        self._reduce_epoch, self._reload_loaders = reduce_epoch, reload_loaders
        self._take_a_stop_that_waited = take_a_stop_that_waited

    def attach(
        self, trainer: TrainerSurface, stages: set[str], outermost: str, val_loader: Any = None
    ) -> tuple[list[RemovableEventHandle], ExceptionHooks]:
        """Attach everything `stages` need, in the run's order; returns the handles (for removal) and the run's
        exception hooks. `trainer`: the argument the hooks, the callbacks' decisions and the trackers' runs get."""
        plan = _Plan(self, trainer, stages, val_loader, outermost)
        plan.plan()
        exception_hooks = plan.exception_hooks()
        plan.planned.append((outermost, Events.EXCEPTION_RAISED, exception_hooks))  # last of all: nothing swallows it
        handles: list[RemovableEventHandle] = []
        try:
            for stage, event, handler in plan.planned:
                handles.append(self._engines[stage].add_event_handler(event, handler))
        except BaseException:
            for handle in handles:  # nothing of a run that could not start stays attached
                handle.remove()
            raise
        return handles, exception_hooks


class _Plan:
    """The handlers one entry point attaches, in the order they run (`plan` writes it)."""

    def __init__(
        self, order: RunOrder, trainer: TrainerSurface, stages: set[str], val_loader: Any, outermost: str
    ) -> None:
        self._order, self._stages, self._outermost = order, stages, outermost
        self.planned: list[tuple[str, Any, Callable]] = []
        # the module's and callbacks' handlers: (phase, stage, event name) -> [(event as given, handler)], in the
        # module-then-callbacks order; on_exception hooks by phase
        self._hooks: dict[tuple[CallbackPhase, str, str], list[tuple[Any, Callable]]] = defaultdict(list)
        self._on_exception: dict[CallbackPhase, list[Callable]] = defaultdict(list)
        settings = order._settings()
        # the fit's own work (its validation on `val_loader`)
        self._fit = _FitWork(order, trainer, settings, val_loader) if "fit" in stages else None
        self._start_entry_runs = functools.partial(order._runs.start_entry_runs, trainer)
        self._collect_hooks(trainer)

    def plan(self) -> None:
        """The run's order: the fit's events, each evaluation's, then what is left — the events where only hooks run
        (the batch starts, backward, the optimizer step, checkpoints saved and loaded, ...), in the phases' order."""
        fit = self._fit
        if fit is not None:
            self._plan_fit(fit)
        for stage in sorted(self._stages & {"validate", "test"}):
            self._plan_evaluation(stage, fit)
        if "predict" in self._stages:
            keep = self._order._evaluation.keep_prediction
            self._at("predict", Events.ITERATION_COMPLETED, FIRST, METRICS, keep, HOOKS, AFTER_DECISIONS, LAST)
        if self._outermost in ("validate", "test"):  # on their own: their values reach the trackers, as Lightning's
            runs, stage = self._order._runs, self._outermost
            self._at(stage, Events.STARTED, self._start_entry_runs, FIRST)
            self._at(stage, Events.COMPLETED, LAST, runs.finish_entry_runs)
        for phase, stage, name in list(self._hooks):
            if (phase, stage, name) in self._hooks:
                self._at(stage, name, FIRST, METRICS, HOOKS, AFTER_DECISIONS, LAST)

    def _plan_fit(self, fit: _FitWork) -> None:
        at = self._at
        # before anything else, the trackers' runs start (or resume): every hook of the fit may log to them
        at("fit", TrainerEvents.FIT_STARTED, fit.start_tracker_runs, FIRST, METRICS, HOOKS, AFTER_DECISIONS, LAST)
        # the fit starts: when validation within the epochs is due is known (the epoch's length is)
        at("fit", Events.STARTED, FIRST, METRICS, HOOKS, AFTER_DECISIONS, fit.validation_in_epoch_start, LAST)
        # an epoch starts: the sampler's shuffle for it and the epoch's logs; after its hooks, values log per step
        at(
            "fit", Events.EPOCH_STARTED,
            FIRST, fit.reload_loaders, fit.set_sampler_epoch, fit.start_logs, METRICS, HOOKS, AFTER_DECISIONS, LAST,
            fit.log_per_step,
        )  # fmt: skip
        # a batch ends: its hooks; the ranks agree (stop, keep a checkpoint); checkpoints and early stopping act on it;
        # validation when due; the pre-emption flag exchanged every few steps, after all of it
        at(
            "fit", Events.ITERATION_COMPLETED,
            FIRST, METRICS, HOOKS, fit.decide(Boundary.TRAIN_STEP_END), AFTER_DECISIONS, fit.validate_in_epoch, LAST,
            fit.exchange_preemption,
        )  # fmt: skip
        # an epoch ends: the last accumulation window stepped; the epoch's metrics and values; validation, then the
        # epoch's LR schedulers (the monitored value known); the hooks; the ranks agree; checkpoints and early
        # stopping act; the epoch's values published (with what the hooks logged); printers; the trackers deliver
        at(
            "fit", Events.EPOCH_COMPLETED,
            FIRST, fit.flush_accumulation, METRICS, fit.reduce_epoch, fit.validate, fit.step_epoch_schedulers,
            HOOKS, fit.decide(Boundary.TRAIN_EPOCH_END), AFTER_DECISIONS, fit.take_a_stop_that_waited, fit.publish_epoch,
            LAST, fit.flush_tracker_runs,
        )  # fmt: skip
        # after every hook of the fit's end (what they hand the trackers included), the runs end
        at("fit", TrainerEvents.FIT_COMPLETED, FIRST, METRICS, HOOKS, AFTER_DECISIONS, LAST, fit.finish_tracker_runs)

    def _plan_evaluation(self, stage: str, fit: _FitWork | None) -> None:
        """A validation or test pass (`fit`: the fit it validates, if any)."""
        at, evaluation = self._at, _EvaluationWork(self._order, stage)
        # its logs start with the pass (on_validation_start may log already); values log per step in its epoch
        at(stage, Events.STARTED, FIRST, METRICS, evaluation.start_logs, HOOKS, AFTER_DECISIONS, LAST)
        at(stage, Events.EPOCH_STARTED, FIRST, METRICS, HOOKS, AFTER_DECISIONS, LAST, evaluation.log_per_step)
        # a long validation within a fit is no reason to miss a pre-emption deadline
        exchange_preemption = fit.exchange_preemption if fit is not None else None
        # a batch ends: after its hooks, what was logged with on_step=True is published (Lightning's step axis: the
        # batches of this loader so far)
        at(
            stage, Events.ITERATION_COMPLETED,
            FIRST, METRICS, HOOKS, evaluation.publish_step, AFTER_DECISIONS, LAST, exchange_preemption,
        )  # fmt: skip
        # its epoch ends: the metrics, its values gathered, the hooks, its values published (what they logged too)
        at(
            stage, Events.EPOCH_COMPLETED,
            FIRST, METRICS, evaluation.reduce_epoch, HOOKS, AFTER_DECISIONS, evaluation.publish_epoch, LAST,
        )  # fmt: skip
        if stage == "validate" and fit is not None:  # a validation of the fit ends: the ranks agree (keep the best)
            decide = fit.decide(Boundary.VALIDATION_END)
            at(stage, Events.COMPLETED, FIRST, METRICS, HOOKS, decide, AFTER_DECISIONS, LAST)

    def exception_hooks(self) -> ExceptionHooks:
        """The run's `on_exception` hooks, by phase (within one, the module's first, then the callbacks' in order);
        then, in a fit, the trackers' runs end, FAILED or KILLED (after what the hooks handed them)."""
        hooks = [hook for phase in CallbackPhase for hook in self._on_exception[phase]]
        bridge = self._order._runs
        return ExceptionHooks(hooks, last=lambda engine, exception: bridge.fail_runs(exception))

    def _at(self, stage: str, event: Any, *steps: Step) -> None:
        """Plan `steps` at `event` of `stage`'s engine, in the order given."""
        name = event_key(event)
        for step in steps:
            if step is None:
                continue
            if isinstance(step, CallbackPhase):
                self.planned += [(stage, given, handler) for given, handler in self._hooks.pop((step, stage, name), ())]
            elif isinstance(step, tuple):  # work on a filtered event
                self.planned.append((stage, step[0], step[1]))
            else:
                self.planned.append((stage, event, step))

    def _collect_hooks(self, trainer: TrainerSurface) -> None:
        stages, order = self._stages, self._order
        for target, base, leading, phase in hook_targets(trainer, order._context.module, order._callbacks):
            for stage, event, handler in hook_handlers(target, base, leading, stages | {"outermost"}):
                if stage == "outermost":
                    self._on_exception[phase].append(handler)
                else:
                    self._hooks[(phase, stage, event_key(event))].append((event, handler))
            if isinstance(target, Callback):
                for stage, event, handler in target.event_handlers(trainer):
                    if stage in stages:
                        self._hooks[(phase, stage, event_key(event))].append((event, handler))


def hook_targets(
    trainer: TrainerSurface, module: LoopModule, callbacks: list[Callback]
) -> list[tuple[Any, type, tuple, CallbackPhase]]:
    """Whose hooks a run calls, in the order given: `(target, its base class, the hooks' leading arguments, its
    phase)` — the module (its hooks at HOOKS, before the callbacks'), then each callback with its checked phase
    (`trainer`: the callbacks' hooks' first argument)."""
    targets: list[tuple[Any, type, tuple, CallbackPhase]] = [(module, LoopModule, (), HOOKS)]
    return targets + [(callback, Callback, (trainer, module), phase_of(callback)) for callback in callbacks]


def phase_of(callback: Callback) -> CallbackPhase:
    """`callback.phase`, checked: the order of a run is no number, so a `priority` (how callbacks were once
    ordered) is refused rather than ignored, and so is a phase that is not a `CallbackPhase`."""
    name = type(callback).__name__
    priority = getattr(callback, "priority", None)
    if priority is not None:
        raise TypeError(
            f"{name}.priority = {priority!r}: callbacks are not ordered by numbers. They run in the order given to "
            "the Trainer, after the module's own hooks; to run elsewhere in the run's order, set "
            f"{name}.phase = CallbackPhase.FIRST, METRICS, AFTER_DECISIONS or LAST "
            "(`from tracktrain.callbacks import CallbackPhase`; docs/architecture.md, 'The order of a run')."
        )
    phase = callback.phase
    if not isinstance(phase, CallbackPhase):
        names = ", ".join(f"CallbackPhase.{member.name}" for member in CallbackPhase)
        raise TypeError(f"{name}.phase = {phase!r} is not a CallbackPhase: use one of {names}.")
    return phase


class _FitWork:
    """The Trainer's own work in a fit, one method per piece, each named where `_Plan.plan` places it."""

    def __init__(self, order: RunOrder, trainer: TrainerSurface, settings: RunOrderSettings, val_loader: Any) -> None:
        self._order, self._settings, self._val_loader = order, settings, val_loader
        context, fit_step = order._context, order._fit_step
        self._log = order._metrics.logs["fit"]
        automatic = context.module.automatic_optimization
        self._due: ValidationInEpoch | None = None
        if val_loader is not None and settings.val_check_interval is not None:
            self._due = ValidationInEpoch(settings.val_every_n_epochs, settings.val_check_interval)
        accumulates = context.accumulation is not None and context.accumulation.accumulates
        self.flush_accumulation = fit_step.flush if automatic and accumulates else None
        epoch_schedulers = any(config.interval == "epoch" for config in context.lr_scheduler_configs)
        self.step_epoch_schedulers = fit_step.step_epoch_schedulers if automatic and epoch_schedulers else None
        self._decisions: list[Decision] = order._decisions()
        for callback in order._callbacks:
            self._decisions += callback.decisions(trainer)
        # the trackers' runs start, or resume those of the checkpoint the fit resumed (handed the hooks' argument)
        self.start_tracker_runs = functools.partial(order._runs.start_runs, trainer, context.module)

    @property
    def reload_loaders(self) -> Step:
        """Every `reload_dataloaders_every_n_epochs` epochs, the loaders asked for again (nothing to do otherwise)."""
        return self._order._reload_loaders if self._settings.reload_dataloaders_every_n_epochs else None

    @property
    def take_a_stop_that_waited(self) -> Step:
        """A stop asked for before min_epochs / min_steps were done, once they are (only with one of them)."""
        settings = self._settings
        return self._order._take_a_stop_that_waited if settings.min_epochs or settings.min_steps else None

    def flush_tracker_runs(self) -> None:
        """The epoch's records are handed over for delivery."""
        self._order._runs.flush_runs()

    def finish_tracker_runs(self) -> None:
        """The fit ended: its runs are FINISHED."""
        self._order._runs.finish_runs(self._order._context.module)

    def fail_tracker_runs(self, engine: Engine, exception: BaseException) -> None:
        """The fit stopped on `exception`: its runs are FAILED (KILLED on pre-emption or Ctrl-C)."""
        self._order._runs.fail_runs(exception)

    @property
    def validation_in_epoch_start(self) -> Step:
        """The fit starts: the epoch's length known, when validation within the epoch is due."""
        return self._due.start if self._due is not None else None

    def set_sampler_epoch(self, engine: Engine) -> None:
        """A sampler with `set_epoch` (DistributedSampler) shuffles each epoch differently, the same on every rank.
        (A ResumableEngine sets it itself, per pass over the data.)"""
        set_epoch = getattr(getattr(engine.state.dataloader, "sampler", None), "set_epoch", None)
        if callable(set_epoch) and not isinstance(engine, ResumableEngine):
            set_epoch(engine.state.epoch - 1)

    def start_logs(self) -> None:
        """The epoch's logs start empty, the module in training mode."""
        self._order._context.module.train()
        self._order._metrics.enter_stage("fit")

    def log_per_step(self) -> None:
        """From here to the epoch's end, values log per step by default (Lightning's default for training)."""
        self._log.enter_steps()

    def reduce_epoch(self, engine: Engine) -> None:
        self._order._reduce_epoch("fit", engine)

    def publish_epoch(self) -> None:
        self._order._metrics.publish_epoch("fit")

    @property
    def validate(self) -> Step:
        """Validation at the end of every `val_every_n_epochs`-th epoch (unless it is due within the epochs)."""
        if self._val_loader is None or self._due is not None:
            return None
        return Events.EPOCH_COMPLETED(every=self._settings.val_every_n_epochs), self._run_validation

    @property
    def validate_in_epoch(self) -> Step:
        """Validation every `val_check_interval` batches (Lightning's `val_check_interval`)."""
        if self._due is None:
            return None
        return Events.ITERATION_COMPLETED(event_filter=self._due), self._run_validation

    def _run_validation(self) -> None:
        order = self._order
        order._evaluation.run("validate", order._context.val_dataloaders)  # reloaded every n epochs, if asked

    @property
    def exchange_preemption(self) -> Step:
        """Under DDP, a signal on any rank stops every rank at the same step: every few steps the ranks exchange the
        flag and act on the previous exchange (reading it is a host sync on CUDA, hence not every step). Without
        DDP the check is attached by the signal itself, and steps carry nothing until then."""
        if not self._order._strategy.steps_in_lockstep:
            return None
        return Events.ITERATION_COMPLETED(every=PREEMPTION_EXCHANGE_EVERY), self._order._preemption.check

    def decide(self, boundary: Boundary) -> Step:
        """The decisions declared for `boundary` (the Trainer's and the callbacks'), agreed by every rank in one
        exchange: the only place a fit's ranks agree on what to do there."""
        decisions = [decision for decision in self._decisions if decision.boundary is boundary]
        if not decisions:
            return None
        context, strategy = self._order._context, self._order._strategy

        def decide_at_boundary() -> None:
            if context.fitting:  # a validate() of its own is no boundary of a fit
                decide(decisions, strategy.gather_floats)  # the strategy issues the exchange

        return decide_at_boundary


class _EvaluationWork:
    """The Trainer's own work in a validation or test pass (`stage`)."""

    def __init__(self, order: RunOrder, stage: str) -> None:
        self._metrics, self._reduce_epoch, self._stage = order._metrics, order._reduce_epoch, stage

    def start_logs(self) -> None:
        """An evaluation's logs start empty as the pass starts (`on_validation_start` may log already)."""
        self._metrics.enter_stage(self._stage)

    def log_per_step(self) -> None:
        self._metrics.logs[self._stage].enter_steps()

    def reduce_epoch(self, engine: Engine) -> None:
        self._reduce_epoch(self._stage, engine)

    def publish_epoch(self) -> None:
        self._metrics.publish_epoch(self._stage)

    def publish_step(self) -> None:
        self._metrics.publish_evaluation_step(self._stage)


class ValidationInEpoch:
    """When validation is due within the training epochs (`val_check_interval`, as Lightning counts it): after every
    `interval` batches of the epoch (a float: that fraction of its batches), in every `every_n_epochs`-th epoch."""

    def __init__(self, every_n_epochs: int, interval: int | float) -> None:
        self.every_n_epochs, self.interval = every_n_epochs, interval
        self.batches = 0

    def start(self, engine: Engine) -> None:
        """The fit starts: its epoch length is known. An interval the epoch never reaches is an error, not a fit that
        never validates."""
        length, interval = engine.state.epoch_length, self.interval
        if isinstance(interval, float):
            if length is None:
                raise ValueError(
                    f"Trainer(val_check_interval={interval}) is a fraction of the epoch, but the training loader has no "
                    "length: give a number of batches (an int)."
                )
            self.batches = max(1, int(length * interval))
        elif length is not None and interval > length:
            raise ValueError(
                f"Trainer(val_check_interval={interval}) is more than the {length} training batches of an epoch, so no "
                "validation would ever run: give at most that many, or a fraction of the epoch (a float such as 0.5)."
            )
        else:
            self.batches = interval

    def __call__(self, engine: Engine, event: Any) -> bool:
        return engine.state.epoch % self.every_n_epochs == 0 and (batch_index(engine) + 1) % self.batches == 0
