"""The lifecycle hooks of `LoopModule` and `Callback`, each mapped onto exactly one Engine event.

There is one event system: a hook is an ordinary handler of one event on one of the Trainer's engines. A hook
is attached only when the module or callback overrides it, so a callback with one hook costs one call on one
event. `HOOK_EVENTS` is the whole map; a test checks it is one-to-one and complete.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracktrain.engine.engine import Engine
from tracktrain.engine.events import EventEnum, Events
from tracktrain.engine.model_engine import StepEvents
from tracktrain.trainer.batches import SequentialLoaders

__all__ = ["HOOK_EVENTS", "HookEvent", "TrainerEvents", "batch_index", "hook_handlers"]


class TrainerEvents(EventEnum):
    """Events the Trainer fires on its train engine around `fit` and around checkpoints.

    While CHECKPOINT_SAVING / CHECKPOINT_LOADED fire, `engine.state.checkpoint` is the checkpoint dict: add
    to it while saving, read it while loading.
    """

    FIT_STARTED = "fit_started"
    FIT_COMPLETED = "fit_completed"
    SANITY_CHECK_STARTED = "sanity_check_started"
    SANITY_CHECK_COMPLETED = "sanity_check_completed"
    CHECKPOINT_SAVING = "checkpoint_saving"
    CHECKPOINT_LOADED = "checkpoint_loaded"


def batch_index(engine: Engine) -> int:
    """The index of the current batch within its epoch, counted from 0."""
    epoch_length = engine.state.epoch_length
    iteration = engine.state.iteration - 1
    return iteration % epoch_length if epoch_length else iteration


def _no_args(engine: Engine) -> tuple:
    return ()


def _batch(engine: Engine) -> tuple:
    return engine.state.batch, batch_index(engine)


def _outputs_batch(engine: Engine) -> tuple:
    return engine.state.output, engine.state.batch, batch_index(engine)


def _evaluation_batch(engine: Engine) -> tuple:
    """An evaluation batch hook's arguments, as Lightning gives them: `(batch, batch_idx)`, and when the pass reads
    several loaders, `batch_idx` within the batch's loader and that loader's `dataloader_idx` after it."""
    loaders = engine.state.dataloader
    if isinstance(loaders, SequentialLoaders):
        return engine.state.batch, loaders.batch_idx, loaders.dataloader_idx
    return _batch(engine)


def _evaluation_outputs_batch(engine: Engine) -> tuple:
    return (engine.state.output, *_evaluation_batch(engine))


def _loss(engine: Engine) -> tuple:
    return (engine.state.step_loss,)


def _optimizer(engine: Engine) -> tuple:
    return (engine.state.step_optimizer,)


def _checkpoint(engine: Engine) -> tuple:
    return (engine.state.checkpoint,)


@dataclass(frozen=True)
class HookEvent:
    """Where a hook fires: the engine of `stage` ("fit": the train engine; "validate", "test", "predict": their
    evaluation engines; "outermost": the engine the Trainer's entry point runs), the event, and the hook's
    arguments after `(trainer, module)` (None: the event's own argument, the exception)."""

    stage: str
    event: Any
    arguments: Callable[[Engine], tuple] | None = _no_args


HOOK_EVENTS: dict[str, HookEvent] = {
    "on_fit_start": HookEvent("fit", TrainerEvents.FIT_STARTED),
    "on_fit_end": HookEvent("fit", TrainerEvents.FIT_COMPLETED),
    "on_sanity_check_start": HookEvent("fit", TrainerEvents.SANITY_CHECK_STARTED),
    "on_sanity_check_end": HookEvent("fit", TrainerEvents.SANITY_CHECK_COMPLETED),
    "on_train_start": HookEvent("fit", Events.STARTED),
    "on_train_end": HookEvent("fit", Events.COMPLETED),
    "on_train_epoch_start": HookEvent("fit", Events.EPOCH_STARTED),
    "on_train_epoch_end": HookEvent("fit", Events.EPOCH_COMPLETED),
    "on_train_batch_start": HookEvent("fit", Events.ITERATION_STARTED, _batch),
    "on_train_batch_end": HookEvent("fit", Events.ITERATION_COMPLETED, _outputs_batch),
    "on_before_backward": HookEvent("fit", StepEvents.BACKWARD_STARTED, _loss),
    "on_after_backward": HookEvent("fit", StepEvents.BACKWARD_COMPLETED),
    "on_before_optimizer_step": HookEvent("fit", StepEvents.OPTIMIZER_STEP_STARTED, _optimizer),
    "on_save_checkpoint": HookEvent("fit", TrainerEvents.CHECKPOINT_SAVING, _checkpoint),
    "on_load_checkpoint": HookEvent("fit", TrainerEvents.CHECKPOINT_LOADED, _checkpoint),
    "on_exception": HookEvent("outermost", Events.EXCEPTION_RAISED, None),
}
"""Every hook of `LoopModule` and `Callback`, by name: the engine (stage) and event it runs on, and its arguments.
One-to-one: each hook is exactly one event's handler, attached only when overridden."""
for _stage, _name in (("validate", "validation"), ("test", "test"), ("predict", "predict")):
    HOOK_EVENTS.update(
        {
            f"on_{_name}_start": HookEvent(_stage, Events.STARTED),
            f"on_{_name}_end": HookEvent(_stage, Events.COMPLETED),
            f"on_{_name}_epoch_start": HookEvent(_stage, Events.EPOCH_STARTED),
            f"on_{_name}_epoch_end": HookEvent(_stage, Events.EPOCH_COMPLETED),
            f"on_{_name}_batch_start": HookEvent(_stage, Events.ITERATION_STARTED, _evaluation_batch),
            f"on_{_name}_batch_end": HookEvent(_stage, Events.ITERATION_COMPLETED, _evaluation_outputs_batch),
        }
    )


def overridden_hooks(target: Any, base: type) -> list[str]:
    """The hook names `target`'s class defines differently from `base`."""
    cls = type(target)
    return [name for name in HOOK_EVENTS if getattr(cls, name, None) is not getattr(base, name)]


def hook_handlers(target: Any, base: type, leading: tuple, stages: set[str]) -> list[tuple[str, Any, Callable]]:
    """`(stage, event, handler)` for each hook of `target` overridden from `base` whose stage is in `stages`.

    The handler calls the hook with `leading` first (`(trainer, module)` for callbacks, nothing for the module
    itself), then the hook's arguments read from the engine's state.
    """
    handlers = []
    for name in overridden_hooks(target, base):
        spec = HOOK_EVENTS[name]
        if spec.stage not in stages:
            continue
        handlers.append((spec.stage, spec.event, _handler(getattr(target, name), leading, spec.arguments)))
    return handlers


def _handler(hook: Callable, leading: tuple, arguments: Callable[[Engine], tuple] | None) -> Callable:
    if arguments is None:  # EXCEPTION_RAISED passes the exception after the engine

        def on_exception(engine: Engine, exception: BaseException) -> None:
            hook(*leading, exception)

        return on_exception
    if arguments is _no_args:

        def call(engine: Engine) -> None:
            hook(*leading)

        return call

    def call_with_arguments(engine: Engine) -> None:
        hook(*leading, *arguments(engine))

    return call_with_arguments
