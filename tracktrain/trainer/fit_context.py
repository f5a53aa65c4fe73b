"""`FitContext`: what a fit creates, in one object — one for the Trainer's life, emptied when a fit starts; the parts that
read it are built with it, and it is handed as an argument to the parts that set it up (the session, the checkpoints' resume, the sanity check), and read through the Trainer's properties of the
same names (`trainer.module`, `trainer.optimizers`, `trainer.ckpt_path`, ...) by callbacks, loggers and users.

Nothing outside the `Trainer` class assigns a Trainer attribute: a part of the fit writes the context it was given.
A `validate`/`test`/`predict` outside a fit works on the context of the last fit (or the Trainer's first one): it
replaces the module, its data and the model engine there, and keeps what the fit left (its optimizers, resumed
checkpoint and settings), as Lightning's Trainer keeps them between its entry points.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from tracktrain.engine.events import Events

if TYPE_CHECKING:
    import torch

    from tracktrain.engine.engine import Engine
    from tracktrain.engine.model_engine import ModelEngine
    from tracktrain.trainer.accumulation import AccumulationSchedule
    from tracktrain.trainer.optimizers import LRSchedulerConfig

__all__ = ["FitContext", "current_epoch"]


@dataclass(eq=False)
class FitContext:
    """The state of one fit (and of the entry points run after it)."""

    #: this process's device: the accelerator's until the strategy sets the environment up (`cuda:LOCAL_RANK`)
    device: torch.device
    #: the run's data-order seed: the Trainer's `seed`, else drawn when the fit starts or taken from its checkpoint
    run_seed: int | None = None
    # the LoopModule and the DataModule (typed by the Trainer's properties: importing their modules here, even for
    # types, would tie this one into the Trainer/callbacks circle that is being taken apart)
    module: Any = None
    datamodule: Any = None
    #: steps the module: its optimizers, gradient scaler and the strategy's wrapping
    model_engine: ModelEngine | None = None
    optimizers: list[torch.optim.Optimizer] = field(default_factory=list)
    #: what `LoopModule.optimizers()` hands out (wrapped by a scaler under "16-mixed" manual optimization)
    manual_optimizers: list[Any] = field(default_factory=list)
    lr_scheduler_configs: list[LRSchedulerConfig] = field(default_factory=list)
    val_dataloaders: Any = None
    #: the checkpoint this fit resumed from (None: a new run)
    ckpt_path: str | None = None
    #: `tracktrain.checkpoint.run_settings` of this fit: saved in its checkpoints, the loggers' params
    settings: dict[str, Any] = field(default_factory=dict)
    #: the settings that differ from the checkpoint resumed: `{"trainer/max_epochs": (old, new)}`
    resume_changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    #: True while the fit trains (not during a validate()/test() of its own, nor its sanity check)
    fitting: bool = False
    #: True during the validation batches a fit runs before training
    sanity_checking: bool = False
    #: a stop asked for before `min_epochs` / `min_steps` were done, taken once they are
    stop_waits: bool = False
    #: the batches each optimizer step adds up, epoch by epoch (`tracktrain.trainer.accumulation`)
    accumulation: AccumulationSchedule | None = None
    #: how this Trainer's previous fit ended (`Trainer._last_fit_end`): "limit" (as Lightning's, this one trains
    #: nothing), "stopped" (this one continues its counters, as Lightning's), None (this one is a new run)
    last_fit_end: str | None = None

    def start_next_fit(self) -> None:
        """A new fit starts from nothing of the last one but the device and the data-order seed asked for. In place:
        the Trainer's parts are built with this one object and read it when they act."""
        fresh = FitContext(device=self.device, run_seed=self.run_seed)
        for name in (entry.name for entry in fields(self)):
            setattr(self, name, getattr(fresh, name))


def current_epoch(train_engine: Engine, fitting: bool) -> int:
    """The training epoch being run, counted from 0; after an epoch's end hooks (and outside a fit), the epochs
    finished (Lightning's `current_epoch`)."""
    in_epoch = fitting and train_engine.last_event_name not in (Events.COMPLETED, Events.TERMINATE)
    return max(train_engine.state.epoch - 1, 0) if in_epoch else train_engine.state.epoch
