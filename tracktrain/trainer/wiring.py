"""Which handlers a Trainer entry point attaches to its engines, and in what order.

Everything a run attaches — the Trainer's own handlers, the module's hooks, the callbacks' hooks and their
extra handlers — is planned as `(priority, stage, event, handler)`, sorted once (stably: equal priorities keep
their order), attached, and removed when the entry point returns. Callbacks default to priority 0 and come after
the module's hooks of the same priority.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tracktrain.distributed.boundary import Boundary, Decision, decide
from tracktrain.engine.deterministic import ResumableEngine
from tracktrain.engine.engine import Engine
from tracktrain.engine.events import Events, RemovableEventHandle
from tracktrain.trainer.callback import Callback
from tracktrain.trainer.hooks import batch_index, hook_handlers
from tracktrain.trainer.module import LoopModule

if TYPE_CHECKING:
    from tracktrain.trainer.trainer import Trainer

__all__ = ["ExceptionHooks", "attach_handlers"]

# Priorities of the Trainer's own handlers among the hooks (lower runs first).
FLUSH_ACCUMULATION = -400  # gradients of a last, partial accumulation window (loaders without a length)
REDUCE_EPOCH = -300  # a period's start (logs reset) and end (the epoch's values), before anything reads them
VALIDATE = -200  # validation at the end of a training epoch, before the epoch-end hooks (as in Lightning)
EPOCH_SCHEDULERS = -100  # after validation (monitored metrics known), before hooks and checkpoints save them
VALIDATE_IN_EPOCH = 300  # validation every n batches, after that batch's end hooks (as in Lightning)
DECIDE = 90  # the boundary's decisions, agreed by all ranks: after the hooks that log what they read (0), before
# the callbacks that act on them (ModelCheckpoint, EarlyStopping: 100)
PUBLISH_EPOCH = 500  # the epoch's values to the loggers, with what epoch-end hooks logged
SET_SAMPLER_EPOCH = -500  # before the epoch's iterator is made: a DistributedSampler's shuffle for this epoch
ENTER_STEPS = 1000  # after the epoch-start hooks: from here to the epoch's end, values log per step by default
PREEMPTION = 2000  # after everything a step's end runs (its checkpoint included): a signal saves and stops
LAST = 10**9
PREEMPTION_EXCHANGE_EVERY = 8  # steps between exchanges of the pre-emption flag under DDP


class ExceptionHooks:
    """The `on_exception` hooks of a run, called once per exception, which is then raised on.

    Attached last to the outermost engine's EXCEPTION_RAISED, so that no other handler can swallow the error;
    the Engine reports an exception from inside an epoch twice, and a failure outside the engine (loading a
    checkpoint) not at all, so the entry point also calls `notify` and the identity check keeps it to once.
    """

    def __init__(self, hooks: list[Callable]) -> None:
        self.hooks = hooks
        self._seen: BaseException | None = None

    def notify(self, engine: Engine, exception: BaseException) -> None:
        """Call every hook. One that fails (a tracker that cannot mark its run) is reported as a warning and the
        others still run: the exception being raised is the one the user must see, not a consequence of it."""
        if exception is self._seen:
            return
        self._seen = exception
        for hook in self.hooks:
            try:
                hook(engine, exception)
            except Exception as hook_error:  # noqa: BLE001 - reported, never raised over the run's own error
                warnings.warn(
                    f"An on_exception hook ({getattr(hook, '__qualname__', hook)}) failed while the run was "
                    f"stopping on {type(exception).__name__}: {type(hook_error).__name__}: {hook_error}",
                    stacklevel=2,
                )

    def __call__(self, engine: Engine, exception: BaseException) -> None:
        self.notify(engine, exception)
        raise exception


def attach_handlers(
    trainer: Trainer, stages: set[str], outermost: str, val_loader: Any = None
) -> tuple[list[RemovableEventHandle], ExceptionHooks]:
    """Attach everything `stages` need; returns the handles (for removal) and the run's exception hooks."""
    planned: list[tuple[int, str, Any, Callable]] = []
    for stage in stages - {"predict"}:
        planned += _stage_handlers(trainer, stage)
    if "fit" in stages:
        planned += _fit_handlers(trainer, val_loader)
        planned += _boundary_handlers(trainer)
    if "predict" in stages:
        planned.append((REDUCE_EPOCH, "predict", Events.ITERATION_COMPLETED, trainer.evaluation.keep_prediction))
    on_exception: list[tuple[int, Callable]] = []
    module = trainer.running_module
    targets: list[tuple[Any, type, tuple, int]] = [(module, LoopModule, (), 0)]
    targets += [(callback, Callback, (trainer, module), callback.priority) for callback in trainer.callbacks]
    for target, base, leading, priority in targets:
        for stage, event, handler in hook_handlers(target, base, leading, stages | {"outermost"}):
            if stage == "outermost":
                on_exception.append((priority, handler))
            else:
                planned.append((priority, stage, event, handler))
        if isinstance(target, Callback):
            planned += [
                (priority, stage, event, handler)
                for stage, event, handler in target.event_handlers(trainer)
                if stage in stages
            ]
    on_exception.sort(key=lambda entry: entry[0])
    exception_hooks = ExceptionHooks([handler for _, handler in on_exception])
    planned.append((LAST, outermost, Events.EXCEPTION_RAISED, exception_hooks))
    planned.sort(key=lambda entry: entry[0])
    handles: list[RemovableEventHandle] = []
    try:
        for _, stage, event, handler in planned:
            handles.append(trainer.engines[stage].add_event_handler(event, handler))
    except BaseException:
        for handle in handles:  # nothing of a run that could not start stays attached
            handle.remove()
        raise
    return handles, exception_hooks


def _stage_handlers(trainer: Trainer, stage: str) -> list[tuple[int, str, Any, Callable]]:
    log = trainer.logs[stage]
    # evaluation logs from on_validation_start on; training's logs are per epoch
    period_start = Events.EPOCH_STARTED if stage == "fit" else Events.STARTED
    return [
        (REDUCE_EPOCH, stage, period_start, lambda: trainer.metrics.enter_stage(stage)),
        (ENTER_STEPS, stage, Events.EPOCH_STARTED, log.enter_steps),
        (REDUCE_EPOCH, stage, Events.EPOCH_COMPLETED, lambda engine: trainer.reduce_epoch(stage, engine)),
        (PUBLISH_EPOCH, stage, Events.EPOCH_COMPLETED, lambda: trainer.metrics.publish_epoch(stage)),
    ]


def _fit_handlers(trainer: Trainer, val_loader: Any) -> list[tuple[int, str, Any, Callable]]:
    handlers: list[tuple[int, str, Any, Callable]] = []
    if val_loader is not None:
        event: Any
        if trainer.val_check_interval is not None:
            due = ValidationInEpoch(trainer.val_every_n_epochs, trainer.val_check_interval)
            handlers.append((VALIDATE_IN_EPOCH, "fit", Events.STARTED, due.start))
            event, priority = Events.ITERATION_COMPLETED(event_filter=due), VALIDATE_IN_EPOCH
        else:
            event, priority = Events.EPOCH_COMPLETED(every=trainer.val_every_n_epochs), VALIDATE
        handlers.append((priority, "fit", event, lambda: trainer.run_stage("validate", val_loader)))
    handlers.append((SET_SAMPLER_EPOCH, "fit", Events.EPOCH_STARTED, _set_sampler_epoch))
    if trainer.strategy.steps_in_lockstep:
        # a signal on any rank stops every rank at the same step: every few steps the ranks exchange the flag, and
        # act on the previous exchange (reading it is a host sync on CUDA, hence not every step). Without DDP the
        # check is attached by the signal itself, and steps carry nothing until then.
        exchange = Events.ITERATION_COMPLETED(every=PREEMPTION_EXCHANGE_EVERY)
        handlers.append((PREEMPTION, "fit", exchange, trainer.preemption.check))
        if val_loader is not None:  # a long validation is no reason to miss a pre-emption deadline
            handlers.append((PREEMPTION, "validate", exchange, trainer.preemption.check))
    automatic = trainer.running_module.automatic_optimization
    if automatic and trainer.accumulate_grad_batches > 1:
        handlers.append((FLUSH_ACCUMULATION, "fit", Events.EPOCH_COMPLETED, trainer.fit_step.flush))
    if automatic and any(config.interval == "epoch" for config in trainer.lr_scheduler_configs):
        handlers.append((EPOCH_SCHEDULERS, "fit", Events.EPOCH_COMPLETED, trainer.fit_step.step_epoch_schedulers))
    return handlers


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


_BOUNDARY_EVENTS = {
    Boundary.TRAIN_EPOCH_END: ("fit", Events.EPOCH_COMPLETED),
    Boundary.VALIDATION_END: ("validate", Events.COMPLETED),
    Boundary.TRAIN_STEP_END: ("fit", Events.ITERATION_COMPLETED),
}


def _boundary_handlers(trainer: Trainer) -> list[tuple[int, str, Any, Callable]]:
    """One handler per boundary that has decisions: the only place a fit's ranks agree on what to do there."""
    declared: list[Decision] = trainer.decisions()
    for callback in trainer.callbacks:
        declared += callback.decisions(trainer)
    handlers: list[tuple[int, str, Any, Callable]] = []
    for boundary, (stage, event) in _BOUNDARY_EVENTS.items():
        decisions = [decision for decision in declared if decision.boundary is boundary]
        if decisions:
            handlers.append((DECIDE, stage, event, _decider(trainer, decisions)))
    return handlers


def _decider(trainer: Trainer, decisions: list[Decision]) -> Callable[[], None]:
    def decide_at_boundary() -> None:
        if trainer.fitting:  # a validate() of its own is no boundary of a fit
            decide(decisions, trainer.strategy.gather_floats)  # the strategy issues the exchange

    return decide_at_boundary


def _set_sampler_epoch(engine: Engine) -> None:
    """A sampler with `set_epoch` (DistributedSampler) shuffles each epoch differently, the same on every rank.
    (A ResumableEngine sets it itself, per pass over the data.)"""
    set_epoch = getattr(getattr(engine.state.dataloader, "sampler", None), "set_epoch", None)
    if callable(set_epoch) and not isinstance(engine, ResumableEngine):
        set_epoch(engine.state.epoch - 1)
