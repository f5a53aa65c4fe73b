"""`Checkpoint`: saves the state of models, optimizers, schedulers, scalers, engines and handlers from an Engine
event, keeps the best or the last few, and loads them back (PyTorch-Ignite's `Checkpoint`: same file names,
retention and state_dict). How files are named is `names`, which ones are kept `retention`, and how a
checkpoint is loaded back `loading`; the guarantees are the commit protocol in `tracktrain.checkpoint`.
"""

from __future__ import annotations

import numbers
import os
import warnings
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

from tracktrain.checkpoint.async_saver import AsyncSaver
from tracktrain.checkpoint.discovery import CommittedCheckpoint
from tracktrain.checkpoint.loading import load_all_or_none
from tracktrain.checkpoint.names import (
    check_filename_pattern,
    default_filename_pattern,
    filename_matcher,
    format_score,
    newest_by_step,
)
from tracktrain.checkpoint.retention import (
    Item,
    adopted,
    items_of,
    makes_the_cut,
    metric_score,
    state_dict_of,
    with_new_item,
)
from tracktrain.checkpoint.savers import BaseSaveHandler, CheckpointSkipped, FsspecSaver, make_save_handler
from tracktrain.checkpoint.state import check_objects, state_of
from tracktrain.engine import Engine, EventEnum, Events
from tracktrain.engine.signature import accepts

__all__ = ["Checkpoint", "CheckpointEvents"]


class CheckpointEvents(EventEnum):
    """Events fired by `Checkpoint` on the engine it is attached to."""

    SAVED_CHECKPOINT = "saved_checkpoint"


class Checkpoint:
    """Saves `to_save` when called from an engine event, keeping the `n_saved` best (by `score_function`) or
    latest checkpoints. Everything in `to_save` needs `state_dict()`; DataParallel/DDP models are saved as
    their inner module. One object is saved as its state dict, several as a dict of them.

    Args:
        to_save: name -> object (or nested dicts/lists of objects) to save.
        save_handler: a directory path or fsspec URL (a `DiskSaver`/`FsspecSaver` with `create_dir=True` is made
            for it), a `BaseSaveHandler`, or a callable `(checkpoint, filename[, metadata])`.
        filename_prefix: prefix of the file names.
        score_function: `engine -> number`; the highest scores are kept. Default: the latest are kept.
        score_name: shown in the file name; alone, it makes `score_function` read `engine.state.metrics[score_name]`.
        n_saved: how many checkpoints to keep; None keeps all.
        global_step_transform: `(engine, event) -> int` for the step in the file name (e.g. the trainer's epoch
            when saving from an evaluator).
        filename_pattern: format string with `{filename_prefix}`, `{name}`, `{global_step}`, `{score_name}`,
            `{score}`, `{ext}`. Default: `{filename_prefix}_{name}_{global_step}_{score_name}={score}.{ext}` with
            the parts that are not set left out (see `setup_filename_pattern`); `name` is the key of the single
            object in `to_save`, or "checkpoint" for several; `score` has 4 decimals unless it is an integer.
        include_self: also save this handler's own state (the retention list) under the key "checkpointer".
        greater_or_equal: a score equal to the worst kept one replaces it (default: it is not saved).
        save_on_rank: the rank that writes, when `save_handler` is a path or URL.

    .. code-block:: python

        to_save = {"trainer": trainer, "model": model, "optimizer": optimizer, "lr_scheduler": lr_scheduler}
        checkpoint = Checkpoint(to_save, DiskSaver("/runs/a", require_empty=False), n_saved=2)
        trainer.add_event_handler(Events.ITERATION_COMPLETED(every=100), checkpoint)

        last = Checkpoint.get_last_checkpoint("/runs/a")
        if last is not None:
            Checkpoint.load_objects(to_save, last)
        trainer.run(loader, max_epochs=10)  # continues from the checkpoint's iteration
    """

    SAVED_CHECKPOINT = CheckpointEvents.SAVED_CHECKPOINT
    Item: TypeAlias = Item  # a kept checkpoint: (priority, filename), as Ignite's `Checkpoint.Item`

    def __init__(
        self,
        to_save: Mapping,
        save_handler: str | os.PathLike | Callable | BaseSaveHandler,
        filename_prefix: str = "",
        score_function: Callable[[Engine], int | float] | None = None,
        score_name: str | None = None,
        n_saved: int | None = 1,
        global_step_transform: Callable | None = None,
        filename_pattern: str | None = None,
        include_self: bool = False,
        greater_or_equal: bool = False,
        save_on_rank: int = 0,
    ) -> None:
        if not isinstance(to_save, Mapping):
            raise TypeError(
                f"Argument `to_save` should be a dictionary, but given {type(to_save)}: pass a dict that names "
                "each object, e.g. {'model': model, 'optimizer': optimizer}."
            )
        check_objects(to_save, "state_dict", "to_save")
        if include_self and "checkpointer" in to_save:
            raise ValueError(f"Cannot have key 'checkpointer' if `include_self` is True: {to_save}. Rename that entry.")
        if not isinstance(filename_prefix, str):
            raise TypeError(f"filename_prefix should be a str, got {filename_prefix!r}.")
        if score_function is not None and not callable(score_function):
            raise TypeError(f"score_function should be a function engine -> number, got {score_function!r}.")
        if score_name is not None and not isinstance(score_name, str):
            raise TypeError(f"score_name should be a str, got {score_name!r}.")
        if n_saved is not None and not (isinstance(n_saved, numbers.Integral) and not isinstance(n_saved, bool)):
            raise TypeError(f"n_saved must be a positive integer or None, got {n_saved!r}.")
        if n_saved is not None and n_saved < 1:
            raise ValueError(f"n_saved must be a positive integer or None, got {n_saved}. Use None to keep all.")
        if global_step_transform is not None and not callable(global_step_transform):
            raise TypeError(
                f"global_step_transform should be a function, got {type(global_step_transform)} instead: pass "
                f"a function (engine, event) -> int such as global_step_from_engine(trainer) "
                f"(got {global_step_transform!r})."
            )
        if filename_pattern is not None:
            check_filename_pattern(filename_pattern)

        self.to_save = to_save
        self.filename_prefix = filename_prefix
        self.save_handler = make_save_handler(save_handler, save_on_rank)
        # decided once here rather than by catching TypeError around every save, which would hide the handler's
        # own TypeErrors and save twice
        self._pass_metadata = accepts(self.save_handler, {}, "", {})
        if not self._pass_metadata and not accepts(self.save_handler, {}, ""):
            raise TypeError(
                f"save_handler {self.save_handler!r} must accept (checkpoint, filename) or "
                "(checkpoint, filename, metadata)."
            )
        self.score_function = score_function
        self.score_name = score_name
        if score_name is not None and score_function is None:
            self.score_function = self.get_default_score_fn(score_name)
        self.n_saved = n_saved
        self.ext = "pt"
        self.global_step_transform = global_step_transform
        self.filename_pattern = filename_pattern
        self.include_self = include_self
        self.greater_or_equal = greater_or_equal
        self.save_on_rank = save_on_rank
        self._saved: list[Item] = []
        self._committing: list[Item] | None = None

    # ------------------------------------------------------------------------------------------------- saving
    @property
    def last_checkpoint(self) -> str | Path | None:
        """Where the newest kept checkpoint is: a `Path` for a `DiskSaver`, a URL for an `FsspecSaver`, the file
        name for other save handlers; None before the first save."""
        if not self._saved:
            return None
        return self.path_of(self._saved[-1].filename)

    @property
    def saved_paths(self) -> list[str | Path]:
        """Where every kept checkpoint is (worst first), as `last_checkpoint` names them."""
        return [self.path_of(item.filename) for item in self._saved]

    def writes_filename(self, filename: str) -> bool:
        """Whether `filename` is a name this handler gives its files (any step, any score): what the sweep at the
        start of a run may delete when a killed save left it without a manifest."""
        name = next(iter(self.to_save)) if len(self.to_save) == 1 else "checkpoint"
        with_step = 0 if self.global_step_transform is not None or self.score_function is None else None  # as __call__
        pattern = self._get_filename_pattern(with_step)
        matcher = filename_matcher(pattern, self.filename_prefix, name, self.ext, self.score_name)
        return matcher.fullmatch(filename) is not None

    def path_of(self, filename: str) -> str | Path:
        """Where the file `filename` of this handler is: a path or URL for the savers of a directory (for an
        `AsyncSaver`, the one it wraps), the name itself for other save handlers."""
        saver = self.save_handler.saver if isinstance(self.save_handler, AsyncSaver) else self.save_handler
        path_of = getattr(saver, "path_of", None)
        return path_of(filename) if callable(path_of) else filename

    def reset(self) -> None:
        """Forget the saved checkpoints (the files stay); for running the same engine several times."""
        self._saved = []

    def __call__(self, engine: Engine, *event_args: Any) -> None:
        """Save if the checkpoint makes the cut. Extra event arguments (EXCEPTION_RAISED's exception) are ignored."""
        if not engine.has_registered_events(CheckpointEvents.SAVED_CHECKPOINT):
            engine.register_events(*CheckpointEvents)
        global_step = None
        if self.global_step_transform is not None:
            global_step = self.global_step_transform(engine, engine.last_event_name)
        if self.score_function is not None:
            priority = self.score_function(engine)
            if not isinstance(priority, numbers.Number):
                raise ValueError(
                    f"Output of score_function should be a number, got {type(priority).__name__}: {priority!r}. "
                    "Return a float (for a tensor, call .item())."
                )
        else:
            if global_step is None:
                global_step = engine.state.get_event_attrib_value(Events.ITERATION_COMPLETED)
            priority = global_step

        if not makes_the_cut(self._saved, priority, self.n_saved, self.greater_or_equal):
            return

        name = next(iter(self.to_save)) if len(self.to_save) == 1 else "checkpoint"
        score = format_score(priority) if self.score_function is not None else None
        filename = self._filename(name, global_step, score)
        metadata = {
            "basename": f"{self.filename_prefix}_{name}" if self.filename_prefix else name,
            "score_name": self.score_name,
            "priority": priority,
        }
        saved, evicted = with_new_item(self._saved, Item(priority, filename), self.n_saved)
        # An object saved in this checkpoint that holds this handler's state (a Trainer's callbacks) records the
        # list as it is once this file is committed: resuming from the file then knows the file itself.
        self._committing = saved
        try:
            states = self._collect_states()
        finally:
            self._committing = None

        payload: Any = states if len(states) > 1 else states[name]
        if self.include_self:
            # Unlike Ignite, which adds "checkpointer" inside a single object's state dict (where that object's
            # load_state_dict then rejects it), the file then holds a dict of objects under their keys.
            payload = {**states, "checkpointer": state_dict_of(saved)}
        try:
            if self._pass_metadata:
                self.save_handler(payload, filename, metadata)
            else:
                self.save_handler(payload, filename)
        except CheckpointSkipped as skipped:  # the store did not answer: the list stays as it was, training goes on
            warnings.warn(str(skipped), stacklevel=2)
            return
        # Only now that the new file is committed: a failed save leaves the old files and the list as they were.
        self._saved = saved
        self._remove(evicted)
        engine.fire_event(CheckpointEvents.SAVED_CHECKPOINT)

    def _remove(self, items: list[Item]) -> None:
        if callable(getattr(self.save_handler, "remove", None)):
            for item in items:
                self.save_handler.remove(item.filename)

    def adopt(self, committed: Sequence[CommittedCheckpoint], keep: Collection[str] = ()) -> list[str]:
        """Make the kept list the committed checkpoints of this handler's directory that it names, so that
        retention counts every one of them; returns the names deleted.

        `committed` is that directory's `committed_checkpoints(...)[0]`. The list a checkpoint recorded misses
        what was committed after it (a kill between a newer checkpoint's commit and the older one's deletion
        leaves a checkpoint no list knows, which would stay forever); entries whose checkpoint is no longer
        committed are dropped. An adopted checkpoint takes the priority its manifest recorded (the `priority`
        this handler passed as metadata). Beyond `n_saved`, the worst are deleted now (as many better ones are
        committed), except those named in `keep` (the checkpoint a run resumed from): they go with the next save
        of this handler that pushes them out, once it is committed.

        Only for save handlers that keep manifests (`ModelCheckpoint`'s): Ignite's `Checkpoint` never adopts."""
        self._saved, evicted = adopted(self._saved, committed, self.writes_filename, self.n_saved, keep)
        self._remove(evicted)
        return [item.filename for item in evicted]

    def _filename(self, name: str, global_step: int | None, score: str | None) -> str:
        return self._get_filename_pattern(global_step).format(
            filename_prefix=self.filename_prefix,
            ext=self.ext,
            name=name,
            score_name=self.score_name,
            score=score,
            global_step=global_step,
        )

    def _get_filename_pattern(self, global_step: int | None) -> str:
        if self.filename_pattern is not None:
            return self.filename_pattern
        return default_filename_pattern(
            with_prefix=len(self.filename_prefix) > 0,
            with_score=self.score_function is not None,
            with_score_name=self.score_name is not None,
            with_global_step=global_step is not None,
        )

    def _collect_states(self) -> dict[str, Any]:
        return {key: state_of(obj, f"to_save[{key!r}]") for key, obj in self.to_save.items()}

    setup_filename_pattern = staticmethod(default_filename_pattern)
    get_default_score_fn = staticmethod(metric_score)

    # ----------------------------------------------------------------------------------------------- state dict
    def state_dict(self) -> OrderedDict:
        """The kept checkpoints as `(priority, filename)` pairs, so retention continues after a resume."""
        return state_dict_of(self._committing if self._committing is not None else self._saved)

    def load_state_dict(self, state_dict: Mapping) -> None:
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Argument state_dict should be a dictionary, but given {type(state_dict).__name__}.")
        if "_saved" not in state_dict:
            raise ValueError(
                f"Required state attribute '_saved' is absent in provided state_dict {list(state_dict)}; pass what "
                "Checkpoint.state_dict() returned."
            )
        self._saved = items_of(state_dict)

    # ------------------------------------------------------------------------------------------------- loading
    @staticmethod
    def load_objects(
        to_load: Mapping, checkpoint: str | os.PathLike | Mapping, strict: bool = True, **kwargs: Any
    ) -> None:
        """Restore every object of `to_load` from `checkpoint`: a dict of state dicts, a local path or an fsspec URL.

        The whole checkpoint is read and checked against `to_load` before any `load_state_dict` is called: its
        structure, every module's keys (when strict) and tensor shapes, every optimizer's parameter groups, and
        a `Checkpoint`'s retention list. So a missing key, a shape mismatch, or a missing or corrupted file
        leaves every object untouched. Should an object's own `load_state_dict` still fail (a malformed state
        that only it can judge), the objects loaded before it are restored to their previous state: every object
        is unchanged. (Modules, checked in full beforehand, are loaded last, so that this needs no copy of their
        weights; an object whose `state_dict()` must not be called for a copy, because it talks to other ranks or
        fires hooks, says so with `state_dict_has_side_effects = True` and is loaded after the others.) Tensors are
        read onto the CPU; `load_state_dict` moves them to where each object lives.

        With one object in `to_load`, the checkpoint may be that object's state itself, as `Checkpoint` writes it
        for a single entry of `to_save` (a list entry included). A checkpoint that holds several objects' states
        under other names (every entry a dict or list, none named like a key of the object's own state dict) is
        not taken for the object's state: its key counts as missing.

        Args:
            to_load: name -> object (or nested dicts/lists), as given to `Checkpoint(to_save=...)`.
            checkpoint: the checkpoint.
            strict: with False, keys absent from the checkpoint are skipped (with a warning) and modules load
                with `strict=False`.
            kwargs: passed to `nn.Module.load_state_dict` (e.g. `assign=True`).
        """
        load_all_or_none(to_load, checkpoint, strict, kwargs, check_state=Checkpoint._check_retention_list)

    @staticmethod
    def _check_retention_list(obj: Any, state: Any) -> None:
        """A `Checkpoint`'s retention list, refused before anything is loaded rather than after other objects were."""
        if isinstance(obj, Checkpoint) and isinstance(state, Mapping) and "_saved" in state:
            items_of(state)

    def reload_objects(self, to_load: Mapping, load_kwargs: dict | None = None, **filename_components: Any) -> None:
        """`load_objects` from this handler's directory, naming the file by `name`, `score` and `global_step`."""
        if not isinstance(self.save_handler, FsspecSaver):
            raise AttributeError(
                "Checkpoint's `save_handler` should be of type `DiskSaver` or `FsspecSaver`, given "
                f"{type(self.save_handler).__name__}."
            )
        default_name = next(iter(self.to_save)) if len(self.to_save) == 1 else "checkpoint"
        filename = self._filename(
            filename_components.get("name", default_name),
            filename_components.get("global_step"),
            filename_components.get("score"),
        )
        Checkpoint.load_objects(to_load, self.save_handler.path_of(filename), **(load_kwargs or {}))

    get_last_checkpoint = staticmethod(newest_by_step)
