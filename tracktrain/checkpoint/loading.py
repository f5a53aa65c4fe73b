"""Loading a checkpoint into its objects, all or none (what `Checkpoint.load_objects` does): the whole checkpoint is
read and checked against the objects before any `load_state_dict` is called, and should one still fail, the
objects loaded before it get their previous state back."""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from tracktrain.checkpoint.state import (
    PARALLEL_WRAPPERS,
    check_fits,
    check_objects,
    is_container,
    looks_like_objects,
    match_states,
    read_checkpoint,
)

__all__ = ["load_all_or_none"]


def load_all_or_none(
    to_load: Mapping,
    checkpoint: str | os.PathLike | Mapping,
    strict: bool,
    module_kwargs: dict[str, Any],
    check_state: Callable[[Any, Any], None],
) -> None:
    """Restore every object of `to_load` from `checkpoint` (see `Checkpoint.load_objects`). `check_state(obj,
    state)` is called for every object once the checkpoint is read and checked, before anything is loaded: what
    it raises leaves every object untouched. `module_kwargs` go to `nn.Module.load_state_dict`."""
    if not isinstance(checkpoint, (Mapping, str, os.PathLike)):
        raise TypeError(
            f"Argument checkpoint should be a string or a dictionary, but given {type(checkpoint)}: a path, an "
            "fsspec URL or a dict of state dicts."
        )
    if not isinstance(to_load, Mapping):
        raise TypeError(f"Argument to_load should be a dictionary, but given {type(to_load).__name__}.")
    check_objects(to_load, "load_state_dict", "to_load")
    if isinstance(checkpoint, Mapping):
        source, states = getattr(checkpoint, "source", "the checkpoint dict"), checkpoint
    else:
        source, states = os.fspath(checkpoint), read_checkpoint(checkpoint, lazy_shards=True)

    if len(to_load) == 1:
        # Checkpoint writes a single entry of to_save as that entry's state alone (a list for a list of objects)
        key, obj = next(iter(to_load.items()))
        is_list = is_container(obj) and not isinstance(obj, Mapping) and not hasattr(obj, "load_state_dict")
        if not isinstance(states, Mapping) and is_list:
            states = {key: states}
        elif isinstance(states, Mapping) and key not in states and not looks_like_objects(states, obj):
            states = {key: states}
    if not isinstance(states, Mapping):
        raise ValueError(
            f"Checkpoint file {source} holds a {type(states).__name__}, not a dict of state dicts; it was "
            "not written by Checkpoint or torch.save(state_dict)."
        )
    plan: list[tuple[str, Any, Any]] = []
    missing: list[str] = []
    match_states(to_load, states, "", source, plan, missing)
    plan = [(key_path, obj, _readable_by(obj, state)) for key_path, obj, state in plan]
    if missing and strict:
        raise ValueError(
            f"Key {missing[0]!r} from to_load is not found in {source}: {states.keys()}. It has no state for "
            f"{missing}. Nothing was loaded. "
            "Load only the objects it holds, or pass strict=False to skip the missing ones."
        )
    check_fits(plan, source, strict)
    for _key_path, obj, state in plan:
        check_state(obj, state)
    if missing:
        warnings.warn(
            f"Checkpoint {source} has no state for {missing} (it holds {list(states)}); those objects were left "
            "as they are.",
            stacklevel=3,  # where Checkpoint.load_objects was called
        )

    _apply_all_or_none(plan, source, strict, module_kwargs)


def _readable_by(obj: Any, state: Any) -> Any:
    """`state` as `obj` loads it: an entry of a sharded checkpoint stays unread for an object that reads its own
    shards (`loads_stored_shards`), and is read in full for any other."""
    from tracktrain.checkpoint.sharded import StoredShards

    if isinstance(state, StoredShards) and not getattr(obj, "loads_stored_shards", False):
        return state.full()
    return state


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
    return obj.module if isinstance(obj, PARALLEL_WRAPPERS) else obj


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
