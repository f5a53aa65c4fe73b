"""`Callback`: code run at points of a Trainer's run, each hook an Engine event. The Trainer's extension protocol,
so it lives with the Trainer (the layer that calls it); `tracktrain.callbacks` re-exports it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import Enum
from typing import TYPE_CHECKING, Any

from tracktrain.trainer.lightning_names import check_lightning_callback
from tracktrain.trainer.surface import Checkpointer  # the seam checkpointing callbacks implement

if TYPE_CHECKING:
    import torch

    from tracktrain.distributed.boundary import Decision
    from tracktrain.trainer.module import LoopModule
    from tracktrain.trainer.surface import TrainerSurface

__all__ = ["Callback", "CallbackPhase", "check_state_keys", "with_module_callbacks"]


class CallbackPhase(Enum):
    """Where a callback's hooks run at each event, among the Trainer's own work (the run's order:
    `tracktrain.trainer.run_order`, docs/architecture.md). Within a phase, callbacks run in the order given to the
    Trainer; a module's own hooks run at `HOOKS`, before the callbacks'."""

    FIRST = "first"
    """Before the rest at the event: what must frame all of it (profilers). (The trackers' runs are the Trainer's:
    started before any hook, ended after all of them.)"""
    METRICS = "metrics"
    """Measures of the epoch (metric trackers, timing), taken before the Trainer gathers the epoch's values and
    before the epoch's validation runs."""
    HOOKS = "hooks"
    """The default: with the module's hooks, after the Trainer's own work at the event (the epoch's values
    gathered, validation run, the epoch's schedulers stepped) — where Lightning runs its callbacks."""
    AFTER_DECISIONS = "after_decisions"
    """After the hooks, once every rank agreed on the event's decisions (keep a checkpoint, stop): checkpointing and
    early stopping act here, on what the hooks logged."""
    LAST = "last"
    """After the Trainer published the epoch's values (what the hooks logged included): printers, reporters."""


class Callback:
    """Override the hooks you need; each runs on one Engine event (`tracktrain.trainer.hooks.HOOK_EVENTS`).

    Only overridden hooks are attached, so a callback costs nothing on events it does not use. Callbacks run in
    the order given to the Trainer, after the module's own hook for the same event (as in Lightning); a callback
    that must run elsewhere in the run's order says so with its `phase` (`CallbackPhase`: FIRST, METRICS,
    AFTER_DECISIONS, LAST). For handlers with Ignite filters, return them from `event_handlers`. A callback with
    state implements `state_dict`/`load_state_dict`; it is saved in the Trainer's checkpoints under `state_key`.

    .. code-block:: python

        class PrintLoss(Callback):
            def on_train_epoch_end(self, trainer, module):
                print(trainer.current_epoch, trainer.callback_metrics.get("train_loss"))

            def event_handlers(self, trainer):
                return [("fit", Events.ITERATION_COMPLETED(every=100), lambda engine: print(engine.state.iteration))]
    """

    phase: CallbackPhase = CallbackPhase.HOOKS
    """Where this callback's hooks run among the Trainer's own work at each event (`CallbackPhase`)."""

    @property
    def state_key(self) -> str:
        """The key of this callback's state in checkpoints (the class name; override to tell two apart)."""
        return type(self).__qualname__

    def event_handlers(self, trainer: TrainerSurface) -> Iterable[tuple[str, Any, Callable]]:
        """Extra `(stage, event, handler)` to attach: stage "fit" (train engine), "validate", "test" or
        "predict"; the event may carry a filter (`Events.ITERATION_COMPLETED(every=100)`)."""
        return ()

    def decisions(self, trainer: TrainerSurface) -> Iterable[Decision]:
        """Decisions every rank must take alike (stop, keep a checkpoint), declared here and agreed by the Trainer
        at a boundary of the loop in one exchange, before anything acts on them (`tracktrain.distributed.boundary`). A callback
        never issues a collective of its own to agree on something."""
        return ()

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass

    # ------------------------------------------------------------------------------------------------ fit
    def on_fit_start(self, trainer: TrainerSurface, module: LoopModule) -> None: ...

    def on_fit_end(self, trainer: TrainerSurface, module: LoopModule) -> None: ...

    def on_sanity_check_start(self, trainer: TrainerSurface, module: LoopModule) -> None: ...

    def on_sanity_check_end(self, trainer: TrainerSurface, module: LoopModule) -> None: ...

    def on_train_start(self, trainer: TrainerSurface, module: LoopModule) -> None: ...

    def on_train_end(self, trainer: TrainerSurface, module: LoopModule) -> None: ...

    def on_train_epoch_start(self, trainer: TrainerSurface, module: LoopModule) -> None: ...

    def on_train_epoch_end(self, trainer: TrainerSurface, module: LoopModule) -> None: ...

    def on_train_batch_start(self, trainer: TrainerSurface, module: LoopModule, batch: Any, batch_idx: int) -> None: ...

    def on_train_batch_end(
        self, trainer: TrainerSurface, module: LoopModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None: ...

    def on_before_backward(self, trainer: TrainerSurface, module: LoopModule, loss: torch.Tensor) -> None: ...

    def on_after_backward(self, trainer: TrainerSurface, module: LoopModule) -> None: ...

    def on_before_optimizer_step(
        self, trainer: TrainerSurface, module: LoopModule, optimizer: torch.optim.Optimizer
    ) -> None: ...

    def on_save_checkpoint(self, trainer: TrainerSurface, module: LoopModule, checkpoint: dict[str, Any]) -> None: ...

    def on_load_checkpoint(self, trainer: TrainerSurface, module: LoopModule, checkpoint: dict[str, Any]) -> None: ...

    def on_exception(self, trainer: TrainerSurface, module: LoopModule, exception: BaseException) -> None: ...

    # ------------------------------------------------------------------------------------------ validation
    def on_validation_start(self, trainer: TrainerSurface, module: LoopModule) -> None: ...

    def on_validation_end(self, trainer: TrainerSurface, module: LoopModule) -> None: ...

    def on_validation_epoch_start(self, trainer: TrainerSurface, module: LoopModule) -> None: ...

    def on_validation_epoch_end(self, trainer: TrainerSurface, module: LoopModule) -> None: ...

    def on_validation_batch_start(
        self, trainer: TrainerSurface, module: LoopModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...

    def on_validation_batch_end(
        self,
        trainer: TrainerSurface,
        module: LoopModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None: ...

    # ------------------------------------------------------------------------------------------------ test
    def on_test_start(self, trainer: TrainerSurface, module: LoopModule) -> None: ...

    def on_test_end(self, trainer: TrainerSurface, module: LoopModule) -> None: ...

    def on_test_epoch_start(self, trainer: TrainerSurface, module: LoopModule) -> None: ...

    def on_test_epoch_end(self, trainer: TrainerSurface, module: LoopModule) -> None: ...

    def on_test_batch_start(
        self, trainer: TrainerSurface, module: LoopModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...

    def on_test_batch_end(
        self,
        trainer: TrainerSurface,
        module: LoopModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None: ...

    # --------------------------------------------------------------------------------------------- predict
    def on_predict_start(self, trainer: TrainerSurface, module: LoopModule) -> None: ...

    def on_predict_end(self, trainer: TrainerSurface, module: LoopModule) -> None: ...

    def on_predict_epoch_start(self, trainer: TrainerSurface, module: LoopModule) -> None: ...

    def on_predict_epoch_end(self, trainer: TrainerSurface, module: LoopModule) -> None: ...

    def on_predict_batch_start(
        self, trainer: TrainerSurface, module: LoopModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...

    def on_predict_batch_end(
        self,
        trainer: TrainerSurface,
        module: LoopModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None: ...


def check_state_keys(callbacks: Iterable[Callback]) -> None:
    """Two callbacks with state under one key would overwrite each other's state in checkpoints: refuse them."""
    seen: dict[str, Callback] = {}
    for callback in callbacks:
        if type(callback).state_dict is Callback.state_dict:
            continue
        key = callback.state_key
        if key in seen:
            raise ValueError(
                f"Callbacks {seen[key]!r} and {callback!r} both save their state under state_key {key!r}; override "
                "state_key in one of them (e.g. include its monitored metric) so checkpoints keep both."
            )
        seen[key] = callback


def with_module_callbacks(callbacks: list[Callback], module: LoopModule) -> list[Callback]:
    """`callbacks` with those of `module.configure_callbacks()`, by Lightning's rule: a module's callback replaces the
    given ones of its exact type, and checkpointing callbacks (`Checkpointer`s: `ModelCheckpoint`) go last, so they
    save what the others did. Each entry point applies it (the Trainer's list keeps the result, as Lightning's)."""
    returned = module.configure_callbacks()
    added = [returned] if isinstance(returned, Callback) else returned
    if added is None or isinstance(added, (str, bytes)) or not isinstance(added, Iterable):
        raise TypeError(
            f"{type(module).__name__}.configure_callbacks() must return a Callback or a list of them, got "
            f"{type(returned).__name__}: {returned!r}."
        )
    added = list(added)
    for callback in added:
        if not isinstance(callback, Callback):
            raise TypeError(
                f"{type(module).__name__}.configure_callbacks() returned {callback!r}, which is not a "
                "tracktrain.Callback; subclass tracktrain.Callback (its hooks are Lightning's)."
            )
        check_lightning_callback(callback, Callback)  # as Trainer(callbacks=...) checks them: no hook ignored
    if not added:
        return callbacks
    replaced = {type(callback) for callback in added}
    merged = [callback for callback in callbacks if type(callback) not in replaced] + added
    last = [callback for callback in merged if isinstance(callback, Checkpointer)]
    return [callback for callback in merged if not isinstance(callback, Checkpointer)] + last
