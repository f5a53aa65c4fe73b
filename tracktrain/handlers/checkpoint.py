"""Checkpoints: save the state of models, optimizers, schedulers, scalers, engines and handlers from an Engine
event, keep the best or the last few, and load them back. Behaves as PyTorch-Ignite's `Checkpoint`,
`DiskSaver` and `ModelCheckpoint` (same file names, retention and state_dict), with these guarantees on top:

- A checkpoint is either fully there or not there: it is serialized in memory first, then committed atomically
  through `tracktrain.storage` (temporary file + fsync + rename on disks, a single put on object stores).
- Retention deletes an old checkpoint only after the new one is committed.
- `load_objects` reads and checks the whole checkpoint before it calls any `load_state_dict`.
- Any fsspec URL works where a directory does: `"/runs/a"`, `"memory://runs/a"`, `"s3://bucket/runs/a"`.
"""

from __future__ import annotations

import copy
import numbers
import os
import re
import string
import warnings
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from tracktrain.engine import Engine, EventEnum, Events
from tracktrain.engine._signature import accepts
from tracktrain.handlers.checkpoint_state import (
    _WRAPPERS,
    _check_fits,
    _check_objects,
    _is_container,
    _looks_like_objects,
    _match,
    _state_of,
    read_checkpoint,
)
from tracktrain.handlers.savers import (
    BaseSaveHandler,
    DiskSaver,
    FsspecSaver,
    _make_save_handler,
    saver_for,
)
from tracktrain.number_checks import is_real
from tracktrain.storage.discovery import CommittedCheckpoint, newest_named
from tracktrain.storage.manifest import is_plain_name

__all__ = ["BaseSaveHandler", "Checkpoint", "CheckpointEvents", "DiskSaver", "FsspecSaver", "ModelCheckpoint"]

_PATTERN_FIELDS = {"filename_prefix", "name", "score", "score_name", "global_step", "ext"}


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

    class Item(NamedTuple):
        priority: int | float
        filename: str

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
        _check_objects(to_save, "state_dict", "to_save")
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
            _check_filename_pattern(filename_pattern)

        self.to_save = to_save
        self.filename_prefix = filename_prefix
        self.save_handler = _make_save_handler(save_handler, save_on_rank)
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
        self._saved: list[Checkpoint.Item] = []
        self._committing: list[Checkpoint.Item] | None = None

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
        fields = {
            "filename_prefix": re.escape(self.filename_prefix),
            "name": re.escape(name),
            "ext": re.escape(self.ext),
            "score_name": re.escape(str(self.score_name)),
            # "None": a custom pattern naming a part this handler does not have, as Ignite formats it
            "global_step": r"\d+|None",
            "score": r"-?(?:\d+(?:\.\d+)?(?:e[-+]?\d+)?|nan|inf)|None",
        }
        pattern = "".join(
            re.escape(literal) + (f"(?:{fields[field]})" if field is not None else "")
            for literal, field, _, _ in string.Formatter().parse(self._get_filename_pattern(with_step))
        )
        return re.fullmatch(pattern, filename) is not None

    def path_of(self, filename: str) -> str | Path:
        """Where the file `filename` of this handler is: a path or URL for the savers of a directory."""
        path_of = getattr(self.save_handler, "path_of", None)  # a saver of a directory, perhaps wrapped (AsyncSaver)
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

        if not (self._below_n_saved() or self._beats_worst(priority)):
            return

        name = next(iter(self.to_save)) if len(self.to_save) == 1 else "checkpoint"
        score = self._format_score(priority) if self.score_function is not None else None
        filename = self._filename(name, global_step, score)
        metadata = {
            "basename": f"{self.filename_prefix}_{name}" if self.filename_prefix else name,
            "score_name": self.score_name,
            "priority": priority,
        }
        saved, evicted = self._with_new_item(Checkpoint.Item(priority, filename))
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
            payload = {**states, "checkpointer": self._state_dict_of(saved)}
        if self._pass_metadata:
            self.save_handler(payload, filename, metadata)
        else:
            self.save_handler(payload, filename)
        # Only now that the new file is committed: a failed save leaves the old files and the list as they were.
        self._saved = saved
        self._remove(evicted)
        engine.fire_event(CheckpointEvents.SAVED_CHECKPOINT)

    def _with_new_item(self, item: Checkpoint.Item) -> tuple[list[Checkpoint.Item], list[Checkpoint.Item]]:
        """The kept list once `item` is saved (sorted by priority, worst first), and the items it pushes out: one
        when the list was full, more when it held more than `n_saved` (after `adopt`)."""
        saved = [kept for kept in self._saved if kept.filename != item.filename]  # replaced under the same name
        saved.append(item)
        saved.sort(key=lambda kept: kept.priority)  # stable: among equal priorities, the oldest goes first
        surplus = len(saved) - self.n_saved if self.n_saved is not None else 0
        return saved[max(surplus, 0) :], saved[: max(surplus, 0)]

    def _remove(self, items: list[Checkpoint.Item]) -> None:
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
        mine = {
            checkpoint.data_filename: checkpoint
            for checkpoint in committed
            if self.writes_filename(checkpoint.data_filename)
        }
        kept = [item for item in self._saved if item.filename in mine]
        known = {item.filename for item in kept}
        for checkpoint in sorted(mine.values(), key=lambda checkpoint: checkpoint.order):  # ties: oldest first
            if checkpoint.data_filename in known:
                continue
            priority = checkpoint.manifest["metadata"].get("priority")
            if not is_real(priority) or isinstance(priority, bool):
                warnings.warn(
                    f"Checkpoint {checkpoint.url} records no priority in its manifest, so retention cannot rank it "
                    "and leaves it alone; delete it yourself if it is not wanted.",
                    stacklevel=2,
                )
                continue
            kept.append(Checkpoint.Item(priority, checkpoint.data_filename))
        kept.sort(key=lambda item: item.priority)
        surplus = len(kept) - self.n_saved if self.n_saved is not None else 0
        evicted = [item for item in kept[: max(surplus, 0)] if item.filename not in keep]
        self._saved = [item for item in kept if item not in evicted]
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

    def _below_n_saved(self) -> bool:
        return self.n_saved is None or len(self._saved) < self.n_saved

    def _beats_worst(self, priority: int | float) -> bool:
        # the worst of the n_saved best: the first one unless the list holds more (adopted, see `adopt`)
        worst = self._saved[-self.n_saved if self.n_saved is not None else 0].priority
        return priority >= worst if self.greater_or_equal else priority > worst

    @staticmethod
    def _format_score(score: int | float) -> str:
        return f"{score}" if isinstance(score, numbers.Integral) else f"{score:.4f}"

    def _get_filename_pattern(self, global_step: int | None) -> str:
        if self.filename_pattern is not None:
            return self.filename_pattern
        return self.setup_filename_pattern(
            with_prefix=len(self.filename_prefix) > 0,
            with_score=self.score_function is not None,
            with_score_name=self.score_name is not None,
            with_global_step=global_step is not None,
        )

    def _collect_states(self) -> dict[str, Any]:
        return {key: _state_of(obj, f"to_save[{key!r}]") for key, obj in self.to_save.items()}

    @staticmethod
    def setup_filename_pattern(
        with_prefix: bool = True, with_score: bool = True, with_score_name: bool = True, with_global_step: bool = True
    ) -> str:
        """The default file name pattern for the parts in use; with all of them:
        `{filename_prefix}_{name}_{global_step}_{score_name}={score}.{ext}`."""
        if not (with_global_step or with_score):
            raise ValueError("At least one of with_score and with_global_step should be True.")
        if with_score_name and not with_score:
            raise ValueError("If with_score_name is True, with_score should be also True.")
        pattern = "{name}"
        if with_global_step:
            pattern += "_{global_step}"
        if with_score:
            pattern += "_{score_name}={score}" if with_score_name else "_{score}"
        if with_prefix:
            pattern = "{filename_prefix}_" + pattern
        return pattern + ".{ext}"

    @staticmethod
    def get_default_score_fn(metric_name: str, score_sign: float = 1.0) -> Callable[[Engine], float]:
        """A score function reading `engine.state.metrics[metric_name]`; `score_sign=-1.0` for losses."""
        if score_sign not in (1.0, -1.0):
            raise ValueError(f"Argument score_sign should be 1 or -1, got {score_sign!r}.")

        def score(engine: Engine) -> float:
            return score_sign * engine.state.metrics[metric_name]

        return score

    # ----------------------------------------------------------------------------------------------- state dict
    def state_dict(self) -> OrderedDict:
        """The kept checkpoints as `(priority, filename)` pairs, so retention continues after a resume."""
        return self._state_dict_of(self._committing if self._committing is not None else self._saved)

    @staticmethod
    def _state_dict_of(saved: list[Checkpoint.Item]) -> OrderedDict:
        return OrderedDict([("_saved", [(item.priority, item.filename) for item in saved])])

    def load_state_dict(self, state_dict: Mapping) -> None:
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Argument state_dict should be a dictionary, but given {type(state_dict).__name__}.")
        if "_saved" not in state_dict:
            raise ValueError(
                f"Required state attribute '_saved' is absent in provided state_dict {list(state_dict)}; pass what "
                "Checkpoint.state_dict() returned."
            )
        self._saved = self._items_of(state_dict)

    @staticmethod
    def _items_of(state_dict: Mapping) -> list[Checkpoint.Item]:
        """The retention list in `state_dict`, checked: retention deletes these files, so each must be a plain
        file name inside the save handler's directory."""
        items = []
        for entry in state_dict["_saved"]:
            if not (
                isinstance(entry, Sequence) and len(entry) == 2 and is_real(entry[0]) and isinstance(entry[1], str)
            ):
                raise ValueError(f"Each entry of state_dict['_saved'] must be (priority, filename), got {entry!r}.")
            if not is_plain_name(entry[1]):
                raise ValueError(
                    f"state_dict['_saved'] names the file {entry[1]!r}, which is not a plain file name in the save "
                    "directory (it is absolute, or has a path separator or '..'); retention would delete it. Pass "
                    "what Checkpoint.state_dict() returned, which only holds plain names."
                )
            items.append(Checkpoint.Item(entry[0], entry[1]))
        return items

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
        if not isinstance(checkpoint, (Mapping, str, os.PathLike)):
            raise TypeError(
                f"Argument checkpoint should be a string or a dictionary, but given {type(checkpoint)}: a path, an "
                "fsspec URL or a dict of state dicts."
            )
        if not isinstance(to_load, Mapping):
            raise TypeError(f"Argument to_load should be a dictionary, but given {type(to_load).__name__}.")
        _check_objects(to_load, "load_state_dict", "to_load")
        if isinstance(checkpoint, Mapping):
            source, states = getattr(checkpoint, "source", "the checkpoint dict"), checkpoint
        else:
            source, states = os.fspath(checkpoint), read_checkpoint(checkpoint)

        if len(to_load) == 1:
            # Checkpoint writes a single entry of to_save as that entry's state alone (a list for a list of objects)
            key, obj = next(iter(to_load.items()))
            is_list = _is_container(obj) and not isinstance(obj, Mapping) and not hasattr(obj, "load_state_dict")
            if not isinstance(states, Mapping) and is_list:
                states = {key: states}
            elif isinstance(states, Mapping) and key not in states and not _looks_like_objects(states, obj):
                states = {key: states}
        if not isinstance(states, Mapping):
            raise ValueError(
                f"Checkpoint file {source} holds a {type(states).__name__}, not a dict of state dicts; it was "
                "not written by Checkpoint or torch.save(state_dict)."
            )
        plan: list[tuple[str, Any, Any]] = []
        missing: list[str] = []
        _match(to_load, states, "", source, plan, missing)
        if missing and strict:
            raise ValueError(
                f"Key {missing[0]!r} from to_load is not found in {source}: {states.keys()}. It has no state for "
                f"{missing}. Nothing was loaded. "
                "Load only the objects it holds, or pass strict=False to skip the missing ones."
            )
        _check_fits(plan, source, strict)
        for _key_path, obj, state in plan:
            if isinstance(obj, Checkpoint) and isinstance(state, Mapping) and "_saved" in state:
                Checkpoint._items_of(state)  # refused here rather than after other objects were loaded
        if missing:
            warnings.warn(
                f"Checkpoint {source} has no state for {missing} (it holds {list(states)}); those objects were left "
                "as they are.",
                stacklevel=2,
            )

        _apply_all_or_none(plan, source, strict, kwargs)

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

    @staticmethod
    def get_last_checkpoint(dirname: str | os.PathLike, filename_prefix: str = "") -> str | None:
        """The newest checkpoint in a directory (a path or fsspec URL), for resuming in a new process; None when
        the directory is missing or holds none.

        "Newest" is the largest global step in the name, among `.pt` files named exactly as Checkpoint names them
        by default without a score: `{filename_prefix}_{name}_{global_step}.pt`, or `{name}_{global_step}.pt`
        when `filename_prefix` is empty. `name` must be one token without "_" or "=" (Checkpoint's name for
        several objects is "checkpoint"): otherwise `run_b_model_9.pt` could be prefix "run" with name
        "b_model", and `best_model_9512.pt` a best-score file whose score 9512 reads as a step. So files of
        other prefixes, score files and temporary files of unfinished writes never count, and neither do
        single objects saved under names with "_" (such as "lr_scheduler"): save several objects together, or
        pass the file to `load_objects` yourself. When several handlers save into the same directory, give
        each a prefix and pass it here.

        Complete: where the savers keep manifests (`manifest=True`), only committed checkpoints count, as for
        `Trainer(resume="auto")` (see `tracktrain.storage.discovery`, the one search for the newest checkpoint).
        """
        lead = re.escape(f"{filename_prefix}_") if filename_prefix else ""
        return newest_named(dirname, re.compile(rf"{lead}[^_=/\\]+_(\d+)\.pt"))


class ModelCheckpoint(Checkpoint):
    """`Checkpoint` into a directory, with the objects given at call time: `handler(engine, to_save)`.

    .. code-block:: python

        handler = ModelCheckpoint("/runs/a", "best", n_saved=2, score_name="accuracy")
        evaluator.add_event_handler(Events.COMPLETED, handler, {"model": model})

    `dirname` may also be an fsspec URL; `kwargs` go to `torch.save`. Other arguments as `Checkpoint`,
    `DiskSaver`/`FsspecSaver`.
    """

    def __init__(
        self,
        dirname: str | os.PathLike,
        filename_prefix: str = "",
        score_function: Callable | None = None,
        score_name: str | None = None,
        n_saved: int | None = 1,
        atomic: bool = True,
        require_empty: bool = True,
        create_dir: bool = True,
        global_step_transform: Callable | None = None,
        filename_pattern: str | None = None,
        include_self: bool = False,
        greater_or_equal: bool = False,
        save_on_rank: int = 0,
        **kwargs: Any,
    ) -> None:
        saver = saver_for(
            dirname,
            atomic=atomic,
            create_dir=create_dir,
            require_empty=require_empty,
            save_on_rank=save_on_rank,
            **kwargs,
        )
        super().__init__(
            to_save={},
            save_handler=saver,
            filename_prefix=filename_prefix,
            score_function=score_function,
            score_name=score_name,
            n_saved=n_saved,
            global_step_transform=global_step_transform,
            filename_pattern=filename_pattern,
            include_self=include_self,
            greater_or_equal=greater_or_equal,
            save_on_rank=save_on_rank,
        )

    def __call__(self, engine: Engine, to_save: Mapping) -> None:
        if not isinstance(to_save, Mapping) or len(to_save) == 0:
            raise RuntimeError(f"No objects to checkpoint found: pass a non-empty dict of objects, got {to_save!r}.")
        _check_objects(to_save, "state_dict", "to_save")
        if self.include_self and "checkpointer" in to_save:
            raise ValueError(f"Cannot have key 'checkpointer' if `include_self` is True: {to_save}. Rename that entry.")
        self.to_save = to_save
        super().__call__(engine)


# ------------------------------------------------------------------------------------------------------ helpers
def _apply_all_or_none(plan: list[tuple[str, Any, Any]], source: str, strict: bool, kwargs: dict[str, Any]) -> None:
    """Call each object's `load_state_dict`; if one fails, load the previous state back into those already loaded
    (and into the failing one, which may have applied part of its state) before raising."""
    plan = sorted(plan, key=lambda entry: _load_order(_unwrapped(entry[1])))  # stable within each group
    applied: list[tuple[str, Any, Any]] = []
    for key_path, obj, state in plan:
        obj = _unwrapped(obj)
        previous = _previous_state(obj)
        try:
            if isinstance(obj, nn.Module):
                obj.load_state_dict(state, strict=strict, **kwargs)
            else:
                obj.load_state_dict(state)
        except Exception as error:
            not_restored = _restore([*applied, (key_path, obj, previous)])
            outcome = "every object was left as it was" if not not_restored else f"could not restore {not_restored}"
            if hasattr(error, "add_note"):  # Python >= 3.11
                error.add_note(f"while loading {key_path} from {source}; {outcome}")
            raise
        applied.append((key_path, obj, previous))


def _unwrapped(obj: Any) -> Any:
    return obj.module if isinstance(obj, _WRAPPERS) else obj


def _load_order(obj: Any) -> int:
    """Objects that can be restored load first; then those whose `state_dict()` must not be called to take a copy
    (`state_dict_has_side_effects`: it talks to other ranks or fires hooks); modules, checked in full, last."""
    if isinstance(obj, nn.Module):
        return 2
    return 1 if getattr(obj, "state_dict_has_side_effects", False) else 0


def _previous_state(obj: Any) -> Any:
    """What restores `obj` if a later load fails (None: nothing can). Modules: nothing (checked in full and loaded
    last). Optimizers: their state dict as it is (its tensors are replaced by a load, never written into, so no copy
    of the moments is needed). Anything else: a deep copy (small states: schedulers, engines, callbacks)."""
    if isinstance(obj, nn.Module) or getattr(obj, "state_dict_has_side_effects", False):
        return None
    if isinstance(obj, torch.optim.Optimizer):
        state = obj.state_dict()
        return {"state": dict(state["state"]), "param_groups": state["param_groups"]}
    return copy.deepcopy(obj.state_dict())


def _restore(applied: list[tuple[str, Any, Any]]) -> list[str]:
    """Load each previous state back, newest first; the key paths of those that could not be restored."""
    failed = []
    for key_path, obj, previous in reversed(applied):
        if previous is None:
            failed.append(key_path)  # a module or an object without a copy that failed part-way
            continue
        try:
            obj.load_state_dict(previous)
        except Exception:  # noqa: BLE001 - reported in the note of the error being raised
            failed.append(key_path)
    return failed


def _check_filename_pattern(pattern: str) -> None:
    if not isinstance(pattern, str):
        raise TypeError(f"filename_pattern should be a str, got {pattern!r}.")
    fields = {field for _, field, _, _ in string.Formatter().parse(pattern) if field is not None}
    unknown = fields - _PATTERN_FIELDS
    if unknown:
        raise ValueError(
            f"filename_pattern {pattern!r} uses unknown fields {sorted(unknown)}; it may use {sorted(_PATTERN_FIELDS)}."
        )
