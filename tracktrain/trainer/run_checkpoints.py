"""A run's checkpoints, as the Trainer sees them: what they hold, which one a fit resumes from, and what the
`Checkpointer`s among its callbacks (`ModelCheckpoint`) do when the run must save now.

`Checkpointer` (`tracktrain.trainer.surface`) is the seam: any callback with these members takes part — saving when asked (pre-emption),
waiting for its writes, naming its directory (discovery looks there) and its newest file. The Trainer never
names a callback class.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from tracktrain import storage
from tracktrain.checkpoint.discovery import committed_checkpoints, resume_candidates
from tracktrain.checkpoint.lightning_format import from_lightning, is_lightning_checkpoint
from tracktrain.checkpoint.resume import RESUME_CHOICES, load_newest
from tracktrain.checkpoint.run_settings import changed_settings, check_resumable, describe, run_settings
from tracktrain.checkpoint.savers import deliver_left_over
from tracktrain.checkpoint.state import OptionalEntry, check_summary, read_checkpoint, state_of
from tracktrain.distributed.logger import get_dist_logger
from tracktrain.handlers.checkpoint import Checkpoint
from tracktrain.rng import global_seed
from tracktrain.trainer.arguments import check_location
from tracktrain.trainer.datamodule import datamodule_settings
from tracktrain.trainer.fit_context import current_epoch
from tracktrain.trainer.module import LoopModule
from tracktrain.trainer.module_loading import class_path
from tracktrain.trainer.surface import Checkpointer, TrainerSurface
from tracktrain.trainer.trainer_state import summarize_checkpoint

if TYPE_CHECKING:
    import datetime
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from tracktrain.engine.engine import Engine
    from tracktrain.trainer.fit_context import FitContext
    from tracktrain.trainer.strategies.base import Strategy
    from tracktrain.trainer.trainer_state import TrainerState

__all__ = ["CheckpointSettings", "RunCheckpoints", "WeightsOnlyState", "is_weights_only", "summarize"]

_LIMIT_SETTINGS = ("trainer/max_epochs", "trainer/max_steps", "trainer/max_time")


@dataclass(frozen=True)
class CheckpointSettings:
    """The Trainer's settings the run's checkpoints read, as they are when read (a setting may change between fits:
    `trainer.max_epochs = 4`): where they go by default, the seed, whether a changed module may resume, the limits
    (whether a resumed run is finished) and what the run's settings record."""

    default_root_dir: str
    seed: int | None
    resume_with_changes: bool
    max_epochs: int | None
    max_steps: int | None
    max_time: datetime.timedelta | None
    accumulate_grad_batches: int
    gradient_clip_val: float | None
    precision: str | int
    strategy_name: str
    log_every_n_steps: int


class RunCheckpoints:
    """The checkpoints of one Trainer's runs (see the module's description).

    Args:
        callbacks: the Trainer's one list (setting `trainer.callbacks` replaces its content): the checkpointers in it.
        strategy: saves, loads and gathers the checkpoints' state; the rank that writes.
        context: the fit's (its module, optimizers, model engine, resumed checkpoint and settings).
        state: the Trainer's (step counters, callbacks' state), saved and loaded.
        train_engine: its state saved and loaded (epoch, iteration, the data order's seed).
        settings: the Trainer's settings as they are now (`CheckpointSettings`).
        train_epoch_length: the batches of one training epoch of the fit under way (to place a Lightning checkpoint).
        check_finite: acts on the losses seen before a weights-only checkpoint is taken.
    """

    def __init__(
        self,
        callbacks: Sequence[object],
        strategy: Strategy,
        context: FitContext,
        state: TrainerState,
        train_engine: Engine,
        settings: Callable[[], CheckpointSettings],
        train_epoch_length: Callable[[], int | None],
        check_finite: Callable[[], None],
    ) -> None:
        self._callbacks, self._strategy, self._context, self._state = callbacks, strategy, context, state
        self._train_engine, self._settings = train_engine, settings
        self._train_epoch_length, self._check_finite = train_epoch_length, check_finite

    @property
    def checkpointers(self) -> list[Checkpointer]:
        """The checkpointing callbacks (`ModelCheckpoint`s), in the order they save."""
        return [callback for callback in self._callbacks if isinstance(callback, Checkpointer)]

    @property
    def first(self) -> Checkpointer | None:
        """The first checkpointing callback (Lightning's `trainer.checkpoint_callback`: where "best" is kept)."""
        return next(iter(self.checkpointers), None)

    def directories(self) -> list[str]:
        default = storage.join(self._settings().default_root_dir, "checkpoints")
        return [checkpointer.dirpath or default for checkpointer in self.checkpointers]

    def objects(self, weights_only: bool = False) -> dict[str, Any]:
        """What a checkpoint of the run holds: the module, optimizers, LR schedulers, the train engine's state, the
        Trainer's own (global step, callbacks) and the fit's DataModule, as the strategy saves them. `weights_only`
        (`ModelCheckpoint(save_weights_only=True)`): the module's weights and what `load_from_checkpoint` rebuilds it
        from (its class and hparams, with the step and epoch), nothing a fit resumes from (see `WeightsOnlyState`)."""
        context, strategy = self._context, self._strategy
        if weights_only:
            weights = WeightsOnlyState(context, self._state, self._train_engine, self._check_finite)
            return strategy.checkpoint_objects({"model": context.module, "trainer": weights})
        objects: dict[str, Any] = {
            "model": context.module,
            "train_engine": self._train_engine,
            "trainer": self._state,
        }
        if context.optimizers:
            objects["optimizers"] = list(context.optimizers)
        if context.lr_scheduler_configs:
            objects["lr_schedulers"] = [config.scheduler for config in context.lr_scheduler_configs]
        if context.model_engine is not None and context.model_engine.scaler is not None:
            objects["grad_scaler"] = context.model_engine.scaler
        if context.datamodule is not None:  # its state_dict(), restored on resume (after its setup) as Lightning does
            objects["datamodule"] = context.datamodule
        return strategy.checkpoint_objects(objects)

    def save(
        self,
        context: FitContext,
        filepath: str | os.PathLike,
        save_hooks: Callable[[LoopModule], AbstractContextManager[None]],
        weights_only: bool = False,
    ) -> str:
        """`Trainer.save_checkpoint`: the run's checkpoint written at `filepath` now, as the `Checkpointer`s write
        theirs (the strategy's saver: rank 0 writes a full one, every rank its shards of a sharded one; committed by a
        manifest, so it is complete or absent), with the `on_save_checkpoint` hooks run also outside a fit. Every rank
        calls it (the Trainer's state gathers across ranks); returns the path written. `weights_only`: Lightning's
        `save_checkpoint(path, weights_only=True)`, what `ModelCheckpoint(save_weights_only=True)` writes."""
        if not isinstance(weights_only, bool):
            raise TypeError(f"save_checkpoint(weights_only=...) must be True or False, got {weights_only!r}.")
        url = check_location("Trainer.save_checkpoint(filepath=...)", filepath, "a checkpoint file's path or URL")
        module = context.module
        if module is None:
            raise RuntimeError(
                f"Trainer.save_checkpoint({url!r}) before any fit/validate/test/predict: the Trainer has no module to "
                "save yet. Call trainer.fit(module, ...) first (or save the module's state_dict() yourself)."
            )
        directory, name = storage.split(url)
        if not name:
            raise ValueError(f"Trainer.save_checkpoint(filepath=...) names a directory, not a file: {url!r}.")
        if not context.settings:  # no fit yet: what load_from_checkpoint rebuilds the module from
            context.settings = _run_settings(self._settings(), context, module)
        saver = self._strategy.checkpoint_saver(directory, summarize, None)
        with save_hooks(module):  # the on_save_checkpoint hooks, in a fit's order (`Session.save_hooks`)
            objects = self.objects(weights_only)
            states = {key: state_of(obj, f"checkpoint_objects()[{key!r}]") for key, obj in objects.items()}
        saver(states, name)
        return url

    def save_all_now(self, trainer: TrainerSurface, timeout: float) -> bool:
        """Every checkpointer saves now (`trainer`: their hook's argument); whether all of it was committed within
        `timeout` seconds."""
        import time

        deadline = time.monotonic() + timeout
        checkpointers = self.checkpointers
        for checkpointer in checkpointers:
            checkpointer.save_now(trainer)
        # wait for every one, also after one timed out (all() over a generator would stop at the first False)
        finished = [checkpointer.wait(max(0.0, deadline - time.monotonic())) for checkpointer in checkpointers]
        return all(finished)

    def newest_path(self) -> str | None:
        return next((c.last_model_path for c in self.checkpointers if c.last_model_path), None)

    def newest_before(self, step: int) -> str | None:
        """The newest committed checkpoint of this run taken before optimizer step `step` (for messages)."""
        for checkpointer in self.checkpointers:
            checkpointer.wait()  # a save in flight may be the one asked for
        for directory in self.directories():
            for checkpoint in committed_checkpoints(directory)[0]:  # newest first
                if checkpoint.summary.get("global_step", 0) < step:
                    return checkpoint.url
        return None

    # ------------------------------------------------------------------------------------------------ resume
    def start_run(self, context: FitContext, target: str | os.PathLike | None, module: LoopModule) -> None:
        """Load the checkpoint `target` names, or start a new run; then fix the run's seed and settings (what its
        checkpoints save), the same on every rank, in the fit's `context`."""
        strategy = self._strategy
        context.resume_changes = {}
        context.ckpt_path = self.resume(context, target, module)
        # a new run starts over, even after an interrupted or crashed fit of this Trainer; after a fit that stopped
        # early this one continues it in memory, as Lightning's (the state a stop leaves is complete)
        continues = context.ckpt_path is not None or context.last_fit_end == "stopped"
        if not continues:
            self._state.start_new_run()
        strategy.check_same("global step after loading the checkpoint", self._state.global_step)
        seed: int | None
        if not continues:  # the Trainer's seed, else seed_everything's (Lightning's), else a drawn one
            seed = next((value for value in (self._settings().seed, global_seed()) if value is not None), None)
            seed = _draw_seed() if seed is None else seed
        else:
            seed = self._train_engine.state.seed  # the data order of the run being continued
        # rank 0's, on every rank (the same collective on all of them): the DistributedSampler shuffles alike
        context.run_seed = strategy.rank_zero_value(seed)
        context.settings = _run_settings(self._settings(), context, module)

    def resume(self, context: FitContext, target: str | os.PathLike | None, module: LoopModule) -> str | None:
        """Load the checkpoint `target` names ("auto"/"last": the newest complete one); returns what was loaded,
        None for a new run."""
        strategy = self._strategy
        if target is None:
            return None
        if os.fspath(target) not in RESUME_CHOICES:
            self.load(context, os.fspath(target), module)
            return os.fspath(target)
        if strategy.global_rank == 0:  # rank 0's spool: what an earlier run could not write goes first
            for directory in self.directories():
                deliver_left_over(directory, self._settings().default_root_dir)
        strategy.rank_zero_value(None)  # no rank lists the directory before that
        candidates = resume_candidates(self.directories())
        # a weights-only checkpoint holds nothing to resume a fit from (no optimizer, engine or callback state)
        full = [candidate for candidate in candidates if candidate.resumable]
        skipped = [candidate.url for candidate in candidates[: candidates.index(full[0]) if full else None]]
        loaded = load_newest(full, lambda url: self.load(context, url, module))
        if skipped and loaded is not None:
            get_dist_logger().info(
                f"Resuming {loaded}, the newest full checkpoint: the newer {skipped} are weights-only "
                "(ModelCheckpoint(save_weights_only=True)), for load_from_checkpoint, not for resuming."
            )
        elif skipped:
            warnings.warn(
                f"Starting a new run: the only complete checkpoints in {self.directories()} are weights-only "
                f"({skipped}; ModelCheckpoint(save_weights_only=True)), which hold no optimizer, loop or callback "
                "state to resume from. Load their weights with MyModule.load_from_checkpoint(path), or keep a full "
                "checkpoint too (another ModelCheckpoint without save_weights_only) to resume.",
                stacklevel=6,
            )
        elif loaded is None and target == "last":
            warnings.warn(
                f'fit(ckpt_path="last") found no complete checkpoint in {self.directories()}; starting a new run.',
                stacklevel=6,
            )
        return loaded

    def load(self, context: FitContext, ckpt_path: str, module: LoopModule) -> None:
        """Read `ckpt_path`, refuse it when it was written for another module (see `settings`), then load it; the
        Trainer settings that changed are warned about here and recorded by the loggers."""
        from tracktrain.checkpoint.sharded import VerifyShare  # torch.distributed.checkpoint: when loading

        strategy, settings = self._strategy, self._settings()
        # each rank reads its own shards (on any number of ranks), and checks its share of a sharded one's files
        share = VerifyShare(strategy.global_rank, strategy.world_size, strategy.gather)
        states = read_checkpoint(ckpt_path, lazy_shards=True, share=share)
        if is_lightning_checkpoint(states):
            states = self._from_lightning(states, ckpt_path)
        check_summary(states, summarize)  # before it is trusted as the step it claims (resume="auto" ranks by it)
        if is_weights_only(states):
            # Lightning fails here too (a KeyError: "checkpoint contains only the model"); half a resume is worse
            raise ValueError(
                f"fit(ckpt_path={ckpt_path!r}): that checkpoint is weights-only (ModelCheckpoint(save_weights_only="
                "True)): it holds the module's weights, class and hparams, but no optimizer, LR scheduler, loop or "
                "callback state to resume a fit from. To start a new fit from its weights, load them first "
                "(module = MyModule.load_from_checkpoint(path), then trainer.fit(module, ...) without ckpt_path); to "
                "resume, pass a full checkpoint (a ModelCheckpoint without save_weights_only)."
            )
        saved = (states.get("trainer") or {}).get("settings") if isinstance(states, Mapping) else None
        current = _run_settings(settings, context, module)
        if settings.seed is None:  # the seed is the checkpoint's unless one is given
            current["trainer"].pop("seed")
            if saved:
                saved = {**saved, "trainer": {k: v for k, v in saved.get("trainer", {}).items() if k != "seed"}}
        changes = changed_settings(saved, current)
        check_resumable(changes, ckpt_path, settings.resume_with_changes)
        objects = self.objects()
        absent: list[OptionalEntry] = []
        if isinstance(states, Mapping):
            if "datamodule" not in states:  # saved without one: it keeps its own state
                objects.pop("datamodule", None)
            # a strategy's own entry that this checkpoint predates (e.g. strategy="ft_ddp"'s Manager step)
            absent = [objects.pop(key) for key in list(objects) if key not in states and _optional(objects[key])]
        Checkpoint.load_objects(objects, states)
        for entry in absent:
            entry.load_absent(states)
        context.resume_changes = changes
        limits = {key: change for key, change in changes.items() if key in _LIMIT_SETTINGS}
        others = {key: change for key, change in changes.items() if key not in _LIMIT_SETTINGS}
        if limits:  # raising a limit is how a finished run trains more: expected, not a warning
            get_dist_logger().info(f"Resuming {ckpt_path} with {describe(limits)}.")
        if others:
            warnings.warn(
                f"Resuming {ckpt_path} with changed settings: {describe(others)}. The run continues "
                "with the new ones; the loggers record the change.",
                stacklevel=8,
            )

    def _from_lightning(self, checkpoint: Mapping[str, Any], ckpt_path: str) -> dict[str, Any]:
        """A Lightning checkpoint as ours, the engine placed where the Lightning run was (in epochs of this fit's
        loader), said once: what is resumed and what is not."""
        states, position, left = from_lightning(checkpoint)
        states["trainer"]["settings"] = {}  # Lightning's records nothing to compare this fit's settings with
        epoch_length = self._train_epoch_length()
        if epoch_length is None:
            raise ValueError(
                f"fit(ckpt_path={ckpt_path!r}) is a Lightning checkpoint, which records epochs and batches: resuming "
                "it needs a training loader with a length, to place the run's position in it."
            )
        state = self._train_engine.state_dict()
        seed = self._settings().seed
        states["train_engine"] = {
            **state,
            "epoch_length": epoch_length,
            "iteration": position.iteration(epoch_length),
            "max_epochs": max(position.epochs_done, 1),  # a run under way: this fit's limit is set when it runs
            "seed": seed if seed is not None else _draw_seed(),
        }
        for key in ("data_pass", "data_state", "epoch"):  # what this engine would replay: not Lightning's
            states["train_engine"].pop(key, None)
        states["train_engine"]["rng_states"] = None  # a new pass reseeds (Lightning's generators are not saved)
        get_dist_logger().warning(
            f"Resuming {ckpt_path}, a Lightning checkpoint: its weights, optimizer and LR scheduler states, global "
            f"step ({states['trainer']['global_step']}) and position (epoch {position.epochs_done}, batch "
            f"{position.batches}) are carried over; not {'; '.join(left)}."
        )
        return states

    def already_finished(self) -> bool:
        """Whether the checkpoint resumed already reached the limits: then nothing is trained, nothing is logged."""
        ckpt_path, settings, global_step = self._context.ckpt_path, self._settings(), self._state.global_step
        if ckpt_path is None:
            return False
        state = self._train_engine.state
        epochs_done = state.iteration // state.epoch_length if state.epoch_length else state.epoch
        if settings.max_steps is not None and global_step >= settings.max_steps:
            limit, value = "max_steps", settings.max_steps
        elif settings.max_epochs is not None and epochs_done >= settings.max_epochs:
            limit, value = "max_epochs", settings.max_epochs
        else:
            return False
        get_dist_logger().info(
            f"Run already finished at epoch {epochs_done}, step {global_step} ({ckpt_path}); raise "
            f"{limit} (now {value}) to train more."
        )
        return True


class WeightsOnlyState:
    """The "trainer" entry of a weights-only checkpoint: what `load_from_checkpoint` rebuilds the module from (its
    class and the run's settings, with its hparams), the step and epoch it was taken at (for its manifest and name),
    and `weights_only: True`, by which a fit refuses to resume from it. The module's `on_save_checkpoint` runs, as
    Lightning runs it for such a checkpoint (the callbacks' do not: their state is not saved)."""

    state_dict_has_side_effects = True  # it runs a hook: `Checkpoint.load_objects` must not call it

    def __init__(
        self, context: FitContext, state: TrainerState, train_engine: Engine, check_finite: Callable[[], None]
    ) -> None:
        """`context`: the fit's (its module and settings, read as the checkpoint is taken); `state`: the step
        counters; `train_engine`: the epoch and iteration; `check_finite`: acts on the losses seen before saving."""
        self._context, self._state, self._train_engine, self._check_finite = context, state, train_engine, check_finite

    def state_dict(self) -> dict[str, Any]:
        self._check_finite()  # as for a full checkpoint: never the parameters of a step after a non-finite loss
        context, state = self._context, self._state
        engine = self._train_engine.state
        checkpoint: dict[str, Any] = {
            "weights_only": True,
            "global_step": state.global_step,
            "samples_seen": state.samples_seen,
            "epoch": current_epoch(self._train_engine, context.fitting),
            "iteration": int(engine.iteration),
            # completed epochs, as a full checkpoint's manifest counts them (the engine's iteration / epoch length)
            "epochs_done": int(engine.iteration) // int(engine.epoch_length) if engine.epoch_length else engine.epoch,
            "settings": context.settings,
        }
        module = context.module
        if module is not None:
            checkpoint["module_class"] = class_path(type(module))
            module.on_save_checkpoint(checkpoint)
        return checkpoint

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        raise ValueError("A weights-only checkpoint's trainer entry is not loaded into a Trainer (see RunCheckpoints).")


def is_weights_only(states: Any) -> bool:
    """Whether the checkpoint `states` (as read) was written by `ModelCheckpoint(save_weights_only=True)`."""
    trainer = states.get("trainer") if isinstance(states, Mapping) else None
    return bool(isinstance(trainer, Mapping) and trainer.get("weights_only"))


def summarize(checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest summary of a run's checkpoint (`summarize_checkpoint`); a weights-only one's says so, with its
    epoch and iteration (it has no engine state), so that resuming passes it over without reading it."""
    summary = summarize_checkpoint(checkpoint)
    trainer = checkpoint.get("trainer") or {}
    if trainer.get("weights_only"):
        summary.update(
            epoch=int(trainer.get("epochs_done", 0)), iteration=int(trainer.get("iteration", 0)), weights_only=True
        )
    return summary


def _optional(obj: Any) -> bool:
    return isinstance(obj, OptionalEntry)


def _draw_seed() -> int:
    """The seed of a run given none (recorded in its checkpoints and params, so the run can be repeated), drawn from
    torch's global generator: a script that seeds torch itself (`torch.manual_seed(0)`) repeats its runs, as it
    does under Lightning, and one that seeds nothing gets a fresh order each run."""
    return int(torch.randint(0, 2**31 - 1, ()).item())


def _run_settings(settings: CheckpointSettings, context: FitContext, module: LoopModule) -> dict[str, Any]:
    """What the run's checkpoints save of its settings and the loggers record: the module's class and hparams, the
    datamodule's (if the fit has one), and the Trainer's."""
    return run_settings(module, _trainer_settings(settings, context)) | datamodule_settings(context.datamodule)


def _trainer_settings(settings: CheckpointSettings, context: FitContext) -> dict[str, Any]:
    """The Trainer's part of the run's settings: what changes the run's result, compared when a fit resumes."""
    return {
        "max_epochs": settings.max_epochs,
        "max_steps": settings.max_steps,
        "max_time": None if settings.max_time is None else str(settings.max_time),
        "accumulate_grad_batches": (
            context.accumulation.setting() if context.accumulation is not None else settings.accumulate_grad_batches
        ),
        "gradient_clip_val": settings.gradient_clip_val,
        "precision": settings.precision,
        "strategy": settings.strategy_name,
        "seed": context.run_seed,
        "log_every_n_steps": settings.log_every_n_steps,
    }
