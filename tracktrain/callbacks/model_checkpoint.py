"""`ModelCheckpoint`: the Trainer's checkpoints — top-k by a monitored metric, every n epochs or steps, and last."""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import time
import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from tracktrain import storage
from tracktrain.callbacks.base import Callback, CallbackPhase
from tracktrain.checkpoint import lease
from tracktrain.checkpoint.async_saver import AsyncSaver
from tracktrain.checkpoint.discovery import committed_checkpoints
from tracktrain.checkpoint.filename_template import check_save_top_k, template_of, top_k_handler
from tracktrain.checkpoint.manifest import remove_uncommitted
from tracktrain.checkpoint.savers import FsspecSaver
from tracktrain.checkpoint.spool import Spool, spool_dir_for
from tracktrain.distributed.boundary import Boundary, Decision
from tracktrain.distributed.logger import get_dist_logger
from tracktrain.distributed.ranks import global_rank
from tracktrain.handlers.checkpoint import Checkpoint
from tracktrain.storage.check import check_writable
from tracktrain.trainer.arguments import check_location
from tracktrain.trainer.monitor import monitored_value
from tracktrain.trainer.run_checkpoints import summarize

if TYPE_CHECKING:
    from tracktrain.trainer.module import LoopModule
    from tracktrain.trainer.surface import TrainerSurface

__all__ = ["ModelCheckpoint"]


class ModelCheckpoint(Callback):
    """Save `trainer.checkpoint_objects()` (module, optimizers, schedulers, engine and Trainer state) with a
    `Checkpoint` handler, so any checkpoint resumes with `trainer.fit(..., ckpt_path=path)`, and the newest with
    `Trainer(resume="auto")` or `fit(ckpt_path="last")`.

    Every checkpoint is committed with a manifest (sizes, SHA-256, step, epoch, tracker run ids; see
    `tracktrain.checkpoint.manifest`): one that a crash cut short is never loaded. With `async_save` the training
    loop only waits for a CPU snapshot of the state; the write happens in the background, and the next save and
    the end of fit wait for it. Retention deletes a checkpoint only after the newer one is committed, and only
    files of this directory. A resumed run counts every committed checkpoint of the directory named as this
    callback names them (those a killed run left behind too), so after any number of kills and restarts the
    directory holds what `save_top_k` and `save_last` say; the one it resumed from is kept until a newer
    checkpoint of the same kind (top-k or latest) is committed.

    Args:
        dirpath: directory or fsspec URL (default: `default_root_dir/checkpoints`).
        filename_prefix: prefix of the file names (`{prefix}_checkpoint_{step}.pt`, with the score when
            monitoring).
        filename: Lightning's template of the top-k files' names instead: `"{epoch}-{val_loss:.2f}"` gives
            `epoch=3-val_loss=0.52.pt` (`epoch`, `step` and logged metrics; see `tracktrain.checkpoint.filename_template`).
        auto_insert_metric_name: with `filename`, put `name=` before each value (False: the values alone).
        monitor: a logged metric; keep the `save_top_k` best by it. None: keep the `save_top_k` latest.
        mode: "min" or "max": which values of `monitor` are better.
        save_top_k: how many to keep (None or -1: all; 0: none, only `save_last`'s).
        save_last: also keep the latest checkpoints whatever their score, as `last_checkpoint_{step}.pt`: True
            keeps one, an int N keeps N. (Pre-emption checkpoints go there too.)
        every_n_epochs: save at the end of every n-th training epoch (after its validation) ...
        every_n_train_steps: ... or every n optimizer steps instead.
        async_save: write in the background (see above); False: the loop waits for each write.
        save_weights_only: Lightning's: the files hold only the module's weights and what
            `LoopModule.load_from_checkpoint` and `trainer.validate/test/predict(ckpt_path=...)` need (its class and
            hparams, the step and epoch), still committed by a manifest. A fit does not resume from one:
            `fit(ckpt_path=...)` naming one is an error, `resume="auto"` passes them over for the newest full
            checkpoint. A pre-emption checkpoint (`save_now`) is full all the same: it exists to be resumed.
        train_time_interval: Lightning's: save when this much time (a `timedelta`) has passed since the last save,
            checked at each optimizer step's end (rank 0's clock decides, for every rank); instead of
            `every_n_epochs` / `every_n_train_steps`.
        save_on_train_epoch_end: Lightning's: whether the epoch's save is at the training epoch's end or after
            validation. Both are one point here (the epoch's validation runs at its end, before the save), so True,
            False and None save at it alike.
        verbose: log a line for each save (the file, and the score with a monitor).
    """

    phase = (
        CallbackPhase.AFTER_DECISIONS
    )  # after the module's and other callbacks' hooks: they may log what is monitored

    def __init__(
        self,
        dirpath: str | os.PathLike | None = None,
        filename_prefix: str = "",
        monitor: str | None = None,
        mode: str = "min",
        save_top_k: int | None = 1,
        save_last: bool | int = False,
        every_n_epochs: int | None = 1,
        every_n_train_steps: int | None = None,
        async_save: bool = True,
        filename: str | None = None,
        auto_insert_metric_name: bool = True,
        save_weights_only: bool = False,
        train_time_interval: datetime.timedelta | None = None,
        save_on_train_epoch_end: bool | None = None,
        verbose: bool = False,
    ) -> None:
        if not isinstance(verbose, bool):
            raise TypeError(f"ModelCheckpoint(verbose=...) must be True or False, got {verbose!r}.")
        if save_on_train_epoch_end not in (None, True, False):
            raise TypeError(
                "ModelCheckpoint(save_on_train_epoch_end=...) must be True, False or None, got "
                f"{save_on_train_epoch_end!r}."
            )
        if train_time_interval is not None:
            if not isinstance(train_time_interval, datetime.timedelta) or train_time_interval.total_seconds() <= 0:
                raise ValueError(
                    f"ModelCheckpoint(train_time_interval=...) must be a positive datetime.timedelta, got "
                    f"{train_time_interval!r}."
                )
            if every_n_train_steps is not None:
                raise ValueError(
                    "ModelCheckpoint got train_time_interval and every_n_train_steps: save by time or by steps, not "
                    "both (as Lightning)."
                )
            every_n_epochs = None
        self.train_time_interval = train_time_interval
        self.save_on_train_epoch_end = save_on_train_epoch_end
        self.verbose = verbose
        self._last_save_time = time.monotonic()
        self._time_due = False
        if not isinstance(save_weights_only, bool):
            raise TypeError(f"ModelCheckpoint(save_weights_only=...) must be True or False, got {save_weights_only!r}.")
        self.save_weights_only = save_weights_only
        self.filename = filename
        self._template = template_of(filename, filename_prefix, auto_insert_metric_name)
        if mode not in ("min", "max"):
            raise ValueError(f'ModelCheckpoint(mode=...) must be "min" or "max", got {mode!r}.')
        for name, value in (("every_n_epochs", every_n_epochs), ("every_n_train_steps", every_n_train_steps)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"ModelCheckpoint({name}=...) must be a positive integer or None, got {value!r}.")
        if not isinstance(save_last, int) or save_last < 0:
            raise ValueError(f"ModelCheckpoint(save_last=...) must be a bool or how many to keep, got {save_last!r}.")
        if every_n_train_steps is not None:
            every_n_epochs = None
        if monitor is not None and not isinstance(monitor, str):
            raise TypeError(f"ModelCheckpoint(monitor=...) must be a logged metric's name, got {monitor!r}.")
        self.dirpath = check_location("ModelCheckpoint(dirpath=...)", dirpath) if dirpath is not None else None
        self.filename_prefix = filename_prefix
        self.monitor = monitor
        self.mode = mode
        self.save_top_k = check_save_top_k(save_top_k)
        self.save_last = save_last
        self.every_n_epochs = every_n_epochs
        self.every_n_train_steps = every_n_train_steps
        self.async_save = async_save
        self._saver: FsspecSaver | AsyncSaver | None = None
        self._checkpoint: Checkpoint | None = None
        self._last: Checkpoint | None = None
        self._pending_state: Mapping[str, Any] | None = None
        self._trainer: TrainerSurface | None = None
        self._last_saved_step = -1
        self._agreed_score: float | None = None  # the score of the save being taken, agreed by every rank

    @property
    def state_key(self) -> str:
        return (
            f"ModelCheckpoint[monitor={self.monitor}, every_n_epochs={self.every_n_epochs}, "
            f"every_n_train_steps={self.every_n_train_steps}, prefix={self.filename_prefix!r}"
            + (f", filename={self.filename!r}" if self.filename is not None else "")
            + (", weights_only]" if self.save_weights_only else "]")
        )

    # ------------------------------------------------------------------------------------------------- paths
    @property
    def best_model_path(self) -> str | None:
        """The best checkpoint kept (the latest one without `monitor`)."""
        last = self._checkpoint.last_checkpoint if self._checkpoint is not None else None
        return os.fspath(last) if last is not None else None

    @property
    def best_model_score(self) -> torch.Tensor | None:
        """Lightning's: the value of `monitor` of `best_model_path` (None without a monitor or a save)."""
        saved = self._checkpoint.state_dict()["_saved"] if self._checkpoint is not None and self.monitor else []
        return torch.tensor(saved[-1][0] if self.mode == "max" else -saved[-1][0]) if saved else None

    @property
    def last_model_path(self) -> str | None:
        last = self._last.last_checkpoint if self._last is not None else None
        return os.fspath(last) if last is not None else None

    @property
    def _directory(self) -> str:
        assert self.dirpath is not None  # chosen when the fit starts (on_fit_start)
        return self.dirpath

    # ------------------------------------------------------------------------------------------------- hooks
    def on_fit_start(self, trainer: TrainerSurface, module: LoopModule) -> None:
        if self._checkpoint is None:
            self.dirpath = self.dirpath or storage.join(trainer.default_root_dir, "checkpoints")
            if global_rank() == 0:
                check_writable(self.dirpath)  # a missing bucket or credentials fail now, not after an epoch
            # a resumed run writes next to the checkpoints it resumes from
            # a remote store that stops answering never stops training: checkpoints wait on local disk meanwhile
            spool = (
                None
                if storage.is_local(self.dirpath)
                else Spool(spool_dir_for(self.dirpath, trainer.default_root_dir), self.dirpath)
            )
            saver = trainer.strategy.checkpoint_saver(self.dirpath, summarize, spool)
            self._saver = AsyncSaver(saver) if self.async_save else saver
            self._checkpoint = top_k_handler(
                self._objects(trainer),
                self._saver,
                self._template,
                lambda: {**trainer.callback_metrics, "epoch": trainer.current_epoch, "step": trainer.global_step},
                trainer.strategy.rank_zero_value,
                filename_prefix=self.filename_prefix,
                score_function=self._score if self.monitor else None,
                score_name=self.monitor,
                n_saved=self.save_top_k or (None if self.save_top_k is None else 1),
                global_step_transform=lambda engine, event: trainer.global_step,
            )
            # built even without save_last: a pre-emption checkpoint must be kept whatever its score
            self._last = Checkpoint(
                self._objects(trainer),
                self._saver,
                filename_prefix="last",
                n_saved=max(int(self.save_last), 1),
                global_step_transform=lambda engine, event: trainer.global_step,
            )
            extension = getattr(saver, "extension", "pt")  # a sharded checkpoint is a directory "<name>.dcp"
            self._checkpoint.ext = self._last.ext = extension
        else:  # a later fit() of the same Trainer: the objects may be new ones
            for handler in (self._checkpoint, self._last):
                if handler is not None:
                    handler.to_save = self._objects(trainer)
        self._trainer = trainer
        if self._pending_state is not None:
            self.load_state_dict(self._pending_state)
        self._protect_resumed_from(trainer.ckpt_path)
        refused: lease.LeaseHeld | None = None
        if global_rank() == 0:  # one writer per directory: held before anything in it is deleted or written
            try:
                lease.acquire(self._directory, self)
            except lease.LeaseHeld as error:
                refused = error
        refused = trainer.strategy.rank_zero_value(
            refused
        )  # every rank stops, none waits in a collective for a rank 0 that did
        if refused is not None:
            raise refused
        if global_rank() == 0:
            self._remove_what_killed_saves_left()
        if trainer.ckpt_path is not None:  # a new run leaves another run's checkpoints in the directory alone
            self._count_every_committed_checkpoint()

    def _objects(self, trainer: TrainerSurface) -> dict[str, Any]:
        """What this callback's checkpoints hold: all the run's state, or with `save_weights_only` the module's."""
        return trainer.checkpoint_objects(weights_only=self.save_weights_only)

    def _remove_what_killed_saves_left(self) -> None:
        assert self._saver is not None and self._checkpoint is not None and self._last is not None
        handlers = (self._checkpoint, self._last)
        removed = remove_uncommitted(
            self._directory,
            keep=self._saver.protected,
            owned=lambda name: any(handler.writes_filename(name) for handler in handlers),
        )
        orphans = [name for name in removed if not name.endswith(".tmp")]
        if orphans:
            warnings.warn(
                f"Deleted {orphans} from {self.dirpath}: checkpoint files without a manifest, "
                "left by a run killed while saving or deleting them (they were never loadable).",
                stacklevel=2,
            )

    def _count_every_committed_checkpoint(self) -> None:
        """Retention counts every committed checkpoint of the directory that a handler names, not only those in the
        lists the resumed checkpoint recorded: a kill after a newer checkpoint's commit and before the older one's
        deletion leaves one that no list knows, which would otherwise stay forever (see `Checkpoint.adopt`). Rank 0
        reads the directory and deletes; every rank takes its lists, so that all take the same keep-or-skip
        decisions at each save."""
        assert self._saver is not None and self._checkpoint is not None and self._last is not None
        handlers = (self._checkpoint, self._last)
        if global_rank() == 0:
            committed, _ = committed_checkpoints(self._directory)  # those that are not were reported when resuming
            for handler in handlers:
                handler.adopt(committed, keep=self._saver.protected)
        assert self._trainer is not None
        states = self._trainer.strategy.rank_zero_value([handler.state_dict() for handler in handlers])
        for handler, state in zip(handlers, states):
            handler.load_state_dict(state)

    def _protect_resumed_from(self, ckpt_path: str | None) -> None:
        """Retention does not delete the checkpoint this run resumed from (it may be all that is left of it) until
        its handler saves again: what that save pushes out is deleted only once the save is committed."""
        if ckpt_path is None or self._saver is None:
            return
        directory, name = storage.split(ckpt_path)
        if directory.rstrip("/\\") == self._directory.rstrip("/\\"):
            self._saver.protected.add(name)

    def on_train_end(self, trainer: TrainerSurface, module: LoopModule) -> None:
        # the last checkpoint committed before the fit's end hooks run (one may read best_model_path's file)
        self.wait()

    def on_fit_end(self, trainer: TrainerSurface, module: LoopModule) -> None:
        try:
            self.wait()
            self._deliver_what_waits()
        finally:
            lease.release(self._directory, self)

    def _deliver_what_waits(self) -> None:
        """At the end of fit, one more try for checkpoints still waiting for the store; what still waits is said."""
        saver = self._saver
        spool = getattr(saver, "spool", None)
        if saver is None or spool is None or spool.is_empty or global_rank() != 0:
            return
        if not spool.deliver(saver.write_serialized, saver.remove_now, force=True):
            warnings.warn(
                f"The run ends with checkpoints not yet written to {self.dirpath}: {spool.behind()} They "
                f"are kept in {spool.directory}; the next run with this checkpoint directory and root "
                "directory delivers them before it resumes.",
                stacklevel=2,
            )

    def on_exception(self, trainer: TrainerSurface, module: LoopModule, exception: BaseException) -> None:
        # the last checkpoint being written is the one a restart resumes from: let it commit (its own error, if
        # any, is secondary to the one being raised)
        with contextlib.suppress(Exception):
            self.wait()
        if self.dirpath is not None:  # None: it failed before choosing one, and holds no lease
            lease.release(self.dirpath, self)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for background writes (at most `timeout` seconds); whether they are all committed."""
        return self._saver.wait(timeout) if isinstance(self._saver, AsyncSaver) else True

    def save_now(self, trainer: TrainerSurface) -> None:
        """Save a checkpoint now into the latest-checkpoints set (what pre-emption does), whatever the score."""
        if self._last is None:
            return
        self._last_saved_step = trainer.global_step
        weights_only_objects = self._last.to_save
        self._last.to_save = trainer.checkpoint_objects()  # full even with save_weights_only: a restart resumes it
        try:
            self._save_with(trainer, self._last)
        finally:
            self._last.to_save = weights_only_objects

    def _due_at_epoch_end(self, trainer: TrainerSurface) -> bool:
        return (
            self.every_n_epochs is not None
            and (trainer.current_epoch + 1) % self.every_n_epochs == 0
            and trainer.global_step != self._last_saved_step
        )

    def _due_at_step_end(self, trainer: TrainerSurface) -> bool:
        step = trainer.global_step
        if self.train_time_interval is not None:
            return self._time_due and step != self._last_saved_step
        return (
            self.every_n_train_steps is not None
            and step > 0
            and step % self.every_n_train_steps == 0
            and step != self._last_saved_step
        )

    def _time_decision(self) -> Decision:
        """With `train_time_interval`: whether the time has come, rank 0's clock for every rank (they save together)."""
        interval = self.train_time_interval
        assert interval is not None

        def elapsed() -> bool:
            return time.monotonic() - self._last_save_time >= interval.total_seconds()

        def take(agreed: float) -> None:
            self._time_due = bool(agreed)

        return Decision(
            Boundary.TRAIN_STEP_END,
            "ModelCheckpoint(train_time_interval)",
            agree="rank_zero",
            propose=elapsed,
            act=take,
        )

    def decisions(self, trainer: TrainerSurface) -> Iterable[Decision]:
        """With a monitor, every rank must take the same keep-or-skip decision (a save gathers every rank's RNG
        state: a rank that skipped it would leave the others waiting in that collective forever), but a value
        logged without sync_dist differs between ranks: rank 0's score is everyone's."""
        monitor = self.monitor
        timed = [self._time_decision()] if self.train_time_interval is not None else []
        if monitor is None:
            return timed

        def score() -> float:
            return monitored_value(trainer.callback_metrics, monitor, "ModelCheckpoint")

        if self.train_time_interval is not None:
            # whether the time has come is agreed in the same exchange: the score goes with every step's proposal,
            # NaN while the monitor is not logged (a save then says so)
            def score_or_nan() -> float:
                return score() if monitor in trainer.callback_metrics else math.nan

            return [
                *timed,
                Decision(
                    Boundary.TRAIN_STEP_END,
                    f"ModelCheckpoint({monitor}) score",
                    agree="rank_zero",
                    propose=score_or_nan,
                    act=self._take_score,
                ),
            ]
        boundary, due = (
            (Boundary.TRAIN_STEP_END, self._due_at_step_end)
            if self.every_n_train_steps is not None
            else (Boundary.TRAIN_EPOCH_END, self._due_at_epoch_end)
        )
        return [
            Decision(
                boundary,
                f"ModelCheckpoint({self.monitor}) score",
                agree="rank_zero",
                propose=score,
                act=self._take_score,
                due=lambda: due(trainer),
            )
        ]

    def _take_score(self, agreed: float) -> None:
        self._agreed_score = agreed

    def on_train_epoch_end(self, trainer: TrainerSurface, module: LoopModule) -> None:
        if self._due_at_epoch_end(trainer):
            self._save(trainer)

    def on_train_batch_end(
        self, trainer: TrainerSurface, module: LoopModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._due_at_step_end(trainer):
            self._save(trainer)

    def _save(self, trainer: TrainerSurface) -> None:
        score = self._agreed_score
        if (
            self.monitor is not None
            and score is not None
            and math.isnan(score)
            and self.monitor not in trainer.callback_metrics
        ):
            monitored_value(trainer.callback_metrics, self.monitor, "ModelCheckpoint")  # raises, naming what is logged
        # (not due without an optimizer step since the last save, under gradient accumulation: nothing new to save)
        self._last_saved_step = trainer.global_step
        self._last_save_time, self._time_due = time.monotonic(), False
        assert self._checkpoint is not None and self._last is not None
        # the top-k file and the latest file hold the same tensors: one snapshot, and no wait between the two
        together = self._saver.one_snapshot() if isinstance(self._saver, AsyncSaver) else contextlib.nullcontext()
        with together:
            if self.save_top_k != 0:
                self._save_with(trainer, self._checkpoint)
            if self.save_last:
                self._save_with(trainer, self._last)

    def _save_with(self, trainer: TrainerSurface, handler: Checkpoint) -> None:
        trainer.persist_logs()  # what was logged up to here outlives a kill after this commit
        assert self._saver is not None
        # the resumed-from checkpoint's protection ends here (see _protect_resumed_from): if this save pushes it out,
        # it is deleted after this save's commit, in order behind it in the background writer
        self._saver.protected.difference_update(
            [name for name in self._saver.protected if handler.writes_filename(name)]
        )
        kept_before = set(handler.saved_paths)
        score = self._agreed_score
        handler(trainer.train_engine)
        for path in set(handler.saved_paths) - kept_before:  # the file this save wrote, if it made the cut
            self._after_commit(trainer, os.fspath(path))
            if self.verbose and global_rank() == 0:
                scored = f", {self.monitor!r} = {score:.6g}" if self.monitor and score is not None else ""
                get_dist_logger().info(
                    f"Epoch {trainer.current_epoch}, global step {trainer.global_step}{scored}: saving {path}"
                )

    def _after_commit(self, trainer: TrainerSurface, path: str) -> None:
        """Tell the loggers that keep checkpoints about the new file once it is committed (not before: an upload
        of a file still being written would fail or, worse, take a part of it). After a background write that is
        the writer thread, right after the commit, so the trackers file it at the step it was taken."""
        step = trainer.global_step
        if isinstance(self._saver, AsyncSaver):
            self._saver.then(lambda: trainer.checkpoint_committed(path, step))
        else:
            trainer.checkpoint_committed(path, step)

    def _score(self, engine: Any) -> float:
        value, self._agreed_score = self._agreed_score, None  # each save has its own decision
        assert value is not None, "ModelCheckpoint saved without its score decision"
        return value if self.mode == "max" else -value

    # ------------------------------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        return {
            "best": self._checkpoint.state_dict() if self._checkpoint is not None else None,
            "last": self._last.state_dict() if self._last is not None else None,
            "last_saved_step": self._last_saved_step,
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        if self._checkpoint is None:  # the handlers are built when fit starts, which is after a checkpoint loads
            self._pending_state = state_dict
            return
        self._pending_state = None
        if state_dict.get("best") is not None:
            self._checkpoint.load_state_dict(state_dict["best"])
        if state_dict.get("last") is not None and self._last is not None:
            self._last.load_state_dict(state_dict["last"])
        self._last_saved_step = state_dict.get("last_saved_step", -1)
