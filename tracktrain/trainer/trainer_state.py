"""`TrainerState`: the Trainer's own part of a checkpoint — the global step and the callbacks' states."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tracktrain.distributed.ranks import rank_and_world_size
from tracktrain.engine.deterministic import ResumableEngine
from tracktrain.rng import get_rng_states, set_rng_states
from tracktrain.trainer.hooks import TrainerEvents
from tracktrain.trainer.module_loading import class_path

if TYPE_CHECKING:
    from tracktrain.engine.engine import Engine
    from tracktrain.trainer.callback import Callback
    from tracktrain.trainer.fit_context import FitContext
    from tracktrain.trainer.strategies.base import Strategy
    from tracktrain.trainer.training_time import TrainingTime

__all__ = ["TrainerState", "summarize_checkpoint"]


class TrainerState:
    """The global step, and `state_dict`/`load_state_dict` for the Trainer's entry in checkpoints.

    Saving fires `TrainerEvents.CHECKPOINT_SAVING` (the `on_save_checkpoint` hooks) with the dict being saved in
    `train_engine.state.checkpoint`, so hooks can add to it; loading fires `CHECKPOINT_LOADED` with it.

    Args:
        context: the fit's (its module and settings are saved).
        callbacks: the Trainer's one list of callbacks (each one's state is saved under its `state_key`).
        strategy: gathers every rank's generators and callback states.
        training_time: the run's, saved and restored over its resumes (`max_time`).
        train_engine: fires the checkpoint hooks, and takes a mid-pass resume's generators.
        before_save: run before anything is read (the non-finite check: no checkpoint holds the parameters of a
            step after a non-finite loss).
    """

    # state_dict() gathers every rank's generators and fires on_save_checkpoint: `Checkpoint.load_objects` must not
    # call it to keep a copy, and loads this entry after the objects it can restore
    state_dict_has_side_effects = True

    def __init__(
        self,
        context: FitContext,
        callbacks: list[Callback],
        strategy: Strategy,
        training_time: TrainingTime,
        train_engine: Engine,
        before_save: Callable[[], None],
    ) -> None:
        self._context, self._callbacks, self._strategy = context, callbacks, strategy
        self._training_time, self._train_engine, self._before_save = training_time, train_engine, before_save
        self.global_step = 0
        self.samples_seen = 0  # training samples this process has read (a tracker axis next to the step)

    def start_new_run(self) -> None:
        """A new run starts over, even after an interrupted or crashed fit of this Trainer: its counters, its training
        time, and the training engine's limits (Ignite's way to make `run()` start afresh, not continue)."""
        self.global_step = 0
        self.samples_seen = 0
        self._training_time.restart()
        engine_state = self._train_engine.state
        engine_state.max_epochs = None
        engine_state.max_iters = None

    def state_dict(self) -> dict[str, Any]:
        self._before_save()
        callbacks = {callback.state_key: callback.state_dict() for callback in self._callbacks}
        # every rank's generators and callback states, in one gather (all ranks take part in every save; rank 0
        # writes): a callback may judge its own rank's values (EarlyStopping on an unsynced metric)
        per_rank = self._strategy.gather((get_rng_states(), callbacks))
        checkpoint: dict[str, Any] = {
            "global_step": self.global_step,
            "samples_seen": self.samples_seen,
            "training_time": self._training_time.elapsed(),  # seconds, over the run's resumes (max_time)
            "callbacks": callbacks,
            "rng_states_per_rank": [rng_states for rng_states, _ in per_rank],
            "settings": self._context.settings,  # compared when a fit resumes (tracktrain.checkpoint.run_settings)
        }
        if self._context.module is not None:  # the class LoopModule.load_from_checkpoint builds from the saved hparams
            checkpoint["module_class"] = class_path(type(self._context.module))
        if len(per_rank) > 1:
            checkpoint["callbacks_per_rank"] = [states for _, states in per_rank]
        self._fire(TrainerEvents.CHECKPOINT_SAVING, checkpoint)
        return checkpoint

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        if not isinstance(state_dict, Mapping) or "global_step" not in state_dict:
            raise ValueError(
                f"Not a Trainer checkpoint entry: expected a dict with 'global_step' and 'callbacks', got "
                f"{type(state_dict).__name__} {list(state_dict) if isinstance(state_dict, Mapping) else ''}."
            )
        self.global_step = int(state_dict["global_step"])
        self.samples_seen = int(state_dict.get("samples_seen", 0))
        self._training_time.load(state_dict.get("training_time", 0.0))
        self._restore_rng_states(state_dict.get("rng_states_per_rank"))
        states = state_dict.get("callbacks", {})
        rank, world_size = rank_and_world_size()
        per_rank = state_dict.get("callbacks_per_rank")
        if per_rank and len(per_rank) == world_size:  # else rank 0's, as for the generators (warned above)
            states = per_rank[rank]
        for callback in self._callbacks:
            if callback.state_key in states:
                callback.load_state_dict(states[callback.state_key])
        self._fire(TrainerEvents.CHECKPOINT_LOADED, dict(state_dict))

    def _restore_rng_states(self, per_rank: list[dict[str, Any]] | None) -> None:
        """This rank's generators as they were at the save. A ResumableEngine applies them itself when it
        resumes mid-pass (at a pass start it reseeds instead); with a plain Engine they are set now."""
        rank, world_size = rank_and_world_size()
        if not per_rank:
            return
        if len(per_rank) != world_size:
            warnings.warn(
                f"The checkpoint holds random generator states for {len(per_rank)} processes, this run has "
                f"{world_size}: every rank continues from rank 0's states, so random draws will differ from the "
                "run that saved it.",
                stacklevel=4,
            )
        states = per_rank[rank] if rank < len(per_rank) else per_rank[0]
        engine = self._train_engine
        if isinstance(engine, ResumableEngine):
            engine.state.rng_states = states
        else:
            set_rng_states(states)

    def _fire(self, event: TrainerEvents, checkpoint: dict[str, Any]) -> None:
        engine = self._train_engine
        engine.state.checkpoint = checkpoint
        try:
            engine.fire_event(event)
        finally:
            engine.state.checkpoint = None


def summarize_checkpoint(checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """What a Trainer checkpoint's manifest records about the run: global step, samples seen, epoch, iteration and
    the trackers' run ids (so a listing finds the newest checkpoint, and the run it belongs to, without loading)."""
    trainer = checkpoint.get("trainer") or {}
    engine = checkpoint.get("train_engine") or {}
    bridge = (trainer.get("callbacks") or {}).get("LoggerBridge") or {}
    iteration, epoch_length = int(engine.get("iteration", 0)), engine.get("epoch_length")
    return {
        "global_step": int(trainer.get("global_step", 0)),
        "samples_seen": int(trainer.get("samples_seen", 0)),
        # completed epochs (the engine's state dict keeps the iteration, from which the epoch follows)
        "epoch": iteration // int(epoch_length) if epoch_length else int(engine.get("epoch", 0)),
        "iteration": iteration,
        "run_ids": dict(bridge.get("run_ids", {})),
    }
