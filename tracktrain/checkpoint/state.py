"""Collecting the state of the objects in a checkpoint, and reading a checkpoint back and matching it to the
objects to load, checked in full before anything is applied."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from tracktrain.checkpoint.lightning_format import from_lightning, is_lightning_checkpoint
from tracktrain.checkpoint.manifest import SUMMARY_COUNTERS, CheckpointCorrupted, UnsafeCheckpoint, read_checked
from tracktrain.checkpoint.plain_data import gist, load_plain

PARALLEL_WRAPPERS = (nn.DataParallel, nn.parallel.DistributedDataParallel)


@runtime_checkable
class OptionalEntry(Protocol):
    """A checkpoint object that older checkpoints (or those of another strategy) may lack: resuming one of those
    calls `load_absent(checkpoint)` (the checkpoint as read) instead of refusing it for the missing entry."""

    def state_dict(self) -> Any: ...
    def load_state_dict(self, state_dict: Any) -> None: ...
    def load_absent(self, checkpoint: Mapping[str, Any]) -> None: ...


def is_container(value: Any) -> bool:
    return isinstance(value, Mapping) or (isinstance(value, Sequence) and not isinstance(value, (str, bytes)))


def _children(value: Any) -> list[tuple[Any, Any]]:
    return list(value.items()) if isinstance(value, Mapping) else list(enumerate(value))


def check_objects(objs: Any, method: str, where: str) -> None:
    """TypeError naming the first object (by its key path) without `method`, looking into nested dicts/lists."""
    for key, obj in _children(objs):
        path = f"{where}[{key!r}]"
        if is_container(obj) and not hasattr(obj, method):
            check_objects(obj, method, path)
        elif not callable(getattr(obj, method, None)):
            raise TypeError(
                f"Object {type(obj)} should have `{method}` method ({path}). Checkpoints hold objects "
                "with state_dict()/load_state_dict() (modules, optimizers, LR schedulers, GradScaler, engines, "
                "handlers); wrap other values in such an object, or leave them out."
            )


def state_of(obj: Any, path: str) -> Any:
    if is_container(obj) and not hasattr(obj, "state_dict"):
        if isinstance(obj, Mapping):
            return {key: state_of(value, f"{path}[{key!r}]") for key, value in obj.items()}
        return [state_of(value, f"{path}[{i}]") for i, value in enumerate(obj)]
    if isinstance(obj, PARALLEL_WRAPPERS):
        obj = obj.module  # saved without the wrapper's "module." prefix, as Ignite does
    try:
        return obj.state_dict()
    except Exception as e:
        if hasattr(e, "add_note"):
            e.add_note(f"while collecting the state of {path} for a checkpoint; nothing was saved")
        raise


def match_states(objs: Any, states: Any, path: str, source: str, plan: list, missing: list) -> None:
    """Pair each object of `objs` with its state in `states` (same nesting), collecting absent keys in `missing`."""
    if not (is_container(objs) and not hasattr(objs, "load_state_dict")):
        plan.append((path, objs, states))
        return
    if isinstance(objs, Mapping):
        if not isinstance(states, Mapping):
            raise ValueError(
                f"Checkpoint {source} holds a {type(states).__name__} at {path or 'top level'}, "
                f"where to_load has a dict {list(objs)}. Nothing was loaded."
            )
        for key, obj in objs.items():
            if key in states:
                match_states(obj, states[key], f"{path}[{key!r}]", source, plan, missing)
            else:
                missing.append(f"{path}[{key!r}]" if path else key)
        return
    if not (is_container(states) and not isinstance(states, Mapping)) or len(states) != len(objs):
        raise ValueError(
            f"Checkpoint {source} holds {type(states).__name__} at {path}, where to_load has a list of "
            f"{len(objs)} objects. Nothing was loaded."
        )
    for i, (obj, state) in enumerate(zip(objs, states)):
        match_states(obj, state, f"{path}[{i}]", source, plan, missing)


def check_fits(plan: list, source: str, strict: bool) -> None:
    """ValueError naming the object, the key and both shapes for the first state in `plan` that its object's
    `load_state_dict` would reject part-way, so that the caller can refuse before anything is applied. Modules
    are checked in full (keys when strict, every tensor's shape); optimizers by their parameter groups and by
    the shapes of per-parameter state they already hold. Other objects check their own state when loading.
    The error is of the class that the object's own `load_state_dict` raises (RuntimeError for modules,
    ValueError for optimizers), so code written against torch or Ignite catches it."""
    for key_path, obj, state in plan:
        if isinstance(obj, PARALLEL_WRAPPERS):
            obj = obj.module
        error: type[Exception]
        if isinstance(obj, nn.Module):
            problem, error = _module_misfit(obj, state, strict), RuntimeError
        elif isinstance(obj, torch.optim.Optimizer):
            problem, error = _optimizer_misfit(obj, state), ValueError
        else:
            continue
        if problem is not None:
            start = f"Error(s) in loading state_dict for {type(obj).__name__}:\n\t" if error is RuntimeError else ""
            raise error(
                f"{start}{problem}. Cannot load {key_path} ({type(obj).__name__}) from {source}: nothing was loaded. "
                "Load a checkpoint written for this architecture, or leave this object out of to_load."
            )


def _module_misfit(module: nn.Module, state: Any, strict: bool) -> str | None:
    if not isinstance(state, Mapping):
        return f"its state is a {type(state).__name__}, not a state dict"
    current = module.state_dict(keep_vars=True)
    if strict:
        missing = [key for key in current if key not in state]
        unexpected = [key for key in state if key not in current]
        if missing or unexpected:
            listed = [
                f"{what} key(s) in state_dict: {', '.join(repr(key).replace(chr(39), chr(34)) for key in keys[:5])}."
                for what, keys in (("Missing", missing), ("Unexpected", unexpected))
                if keys
            ]
            return " ".join(listed) + " (pass strict=False to load the keys both have)"
    for key, value in state.items():
        mine = current.get(key)
        if isinstance(mine, torch.Tensor) and not torch.overrides.is_tensor_like(value):
            # torch's words; it would say so only after loading the keys before this one
            return (
                f'While copying the parameter named "{key}", expected torch.Tensor or Tensor-like object from '
                f"checkpoint but received {type(value)}"
            )
        if not (isinstance(value, torch.Tensor) and isinstance(mine, torch.Tensor)):
            continue
        # lazy modules take any shape (torch does not export the mixin's name)
        if isinstance(mine, nn.parameter.UninitializedTensorMixin):  # type: ignore[attr-defined]
            continue
        if mine.dim() == 0 and tuple(value.shape) == (1,):  # torch loads a 1-element tensor into a scalar
            continue
        if value.shape != mine.shape:
            return (
                f"size mismatch for {key}: copying a param with shape {value.shape} from checkpoint, the shape in "
                f"current model is {mine.shape}"
            )
    return None


def _optimizer_misfit(optimizer: torch.optim.Optimizer, state: Any) -> str | None:
    if not (isinstance(state, Mapping) and isinstance(state.get("param_groups"), Sequence)):
        return f"its state is not an optimizer state dict (it holds {_keys(state)})"
    groups = state["param_groups"]
    if len(groups) != len(optimizer.param_groups):  # torch's words first, as loading would say it
        return (
            f"loaded state dict has a different number of parameter groups: the checkpoint has {len(groups)}, "
            f"the optimizer {len(optimizer.param_groups)}"
        )
    for i, (saved, mine) in enumerate(zip(groups, optimizer.param_groups)):
        if not isinstance(saved, Mapping) or len(saved.get("params", ())) != len(mine["params"]):
            count = len(saved.get("params", ())) if isinstance(saved, Mapping) else "?"
            return (
                f"loaded state dict contains a parameter group that doesn't match the size of optimizer's group: "
                f"parameter group {i} has {count} parameters in the checkpoint, {len(mine['params'])} here"
            )
    # Where this optimizer already has state for a parameter (a resumed run), shapes must agree; comparing with
    # the parameters themselves would be wrong for optimizers whose state is factored (e.g. Adafactor).
    saved_state = state.get("state") or {}
    if not isinstance(saved_state, Mapping):
        return f"its 'state' is a {type(saved_state).__name__}, not a mapping of parameter index to state"
    current = optimizer.state_dict()["state"]
    for index, saved in saved_state.items():
        mine = current.get(index)
        if not (isinstance(saved, Mapping) and isinstance(mine, Mapping)):
            continue
        for name, value in saved.items():
            here = mine.get(name)
            if isinstance(value, torch.Tensor) and isinstance(here, torch.Tensor) and value.shape != here.shape:
                return (
                    f"state[{index!r}][{name!r}] has shape {tuple(value.shape)} in the checkpoint but "
                    f"{tuple(here.shape)} here"
                )
    return None


def _keys(value: Any) -> Any:
    return list(value) if isinstance(value, Mapping) else type(value).__name__


def looks_like_objects(states: Mapping, obj: Any) -> bool:
    """Whether a checkpoint holds several objects' states under their names, rather than `obj`'s own state:
    every entry is a dict or list (a state dict), and none is named like an entry of `obj`'s state dict."""
    if not states or not all(is_container(value) for value in states.values()):
        return False
    if isinstance(obj, PARALLEL_WRAPPERS):
        obj = obj.module
    own = obj if is_container(obj) and not hasattr(obj, "state_dict") else obj.state_dict()
    return not (isinstance(own, Mapping) and any(key in own for key in states))


def read_model_checkpoint(url: str | os.PathLike) -> Mapping[str, Any]:
    """`read_checkpoint(url)` of a checkpoint a Trainer wrote: one that holds a "model" state (KeyError naming what
    it holds otherwise). What loading a trained module back and exporting one read."""
    states = read_checkpoint(url)
    if is_lightning_checkpoint(states):  # a .ckpt Lightning wrote: its weights and hyper_parameters
        states = ReadCheckpoint(from_lightning(states)[0], source=os.fspath(url))
    if not isinstance(states, Mapping) or "model" not in states:
        held = sorted(states) if isinstance(states, Mapping) else type(states).__name__
        raise KeyError(
            f"Checkpoint {os.fspath(url)} holds no 'model' state (it holds {held}): pass a checkpoint a Trainer "
            "wrote (ModelCheckpoint.best_model_path, trainer.save_checkpoint), or load the weights yourself."
        )
    return states


def read_checkpoint(url: str | os.PathLike, lazy_shards: bool = False, share: Any = None) -> Any:
    """torch.load of the file at `url`, checked against its manifest when it has one, with errors that name the
    file and say what to do. A sharded checkpoint (a directory, `tracktrain.checkpoint.sharded`) is read
    whole, or with `lazy_shards` its sharded entries as `StoredShards`, for objects that read their own shards;
    `share` (a `sharded.VerifyShare`): the ranks reading it together share checking its files."""
    from tracktrain.checkpoint import sharded  # torch.distributed.checkpoint: only when one is read

    if sharded.is_sharded_checkpoint(url):
        try:
            states, sharded_manifest = sharded.read_sharded(url, lazy_shards, share)
        except CheckpointCorrupted:
            raise
        except Exception as e:
            raise _corrupted(url, e) from e
        return ReadCheckpoint(states, source=os.fspath(url), manifest=sharded_manifest)
    try:
        data, check, manifest = read_checked(url)
    except FileNotFoundError:
        raise FileNotFoundError(
            errno.ENOENT,
            f"No such file or directory: {os.fspath(url)!r}. Check the path: `tracktrain runs ROOT` lists the "
            'checkpoints of the run under ROOT (resume="auto" takes the newest complete one).',
        ) from None
    except IsADirectoryError:
        raise IsADirectoryError(
            f"Checkpoint {os.fspath(url)} is a directory, and not a sharded checkpoint (it has no .metadata); pass "
            "one checkpoint in it, e.g. Checkpoint.get_last_checkpoint(directory)."
        ) from None
    try:
        states = load_plain(data, f"Checkpoint file {os.fspath(url)}")
    except UnsafeCheckpoint:
        check()  # a file damaged after its commit says so, rather than how unpickling tripped over it
        raise
    except Exception as e:
        check()
        raise _corrupted(url, e) from e
    check()
    return ReadCheckpoint(states, source=os.fspath(url), manifest=manifest) if isinstance(states, dict) else states


class ReadCheckpoint(dict):
    """The states `read_checkpoint` read, where from (`source`: what errors loading them name), and the manifest
    they were checked against (None for a file without one): what it claims of them is compared with them by
    whoever knows their layout (`check_summary`)."""

    def __init__(self, states: dict, source: str, manifest: dict[str, Any] | None = None) -> None:
        super().__init__(states)
        self.source = source
        self.manifest = manifest


def check_summary(states: Any, summarize: Callable[[Mapping[str, Any]], Mapping[str, Any]]) -> None:
    """CheckpointCorrupted unless what the manifest of `states` (a `ReadCheckpoint`) records of the run's counters
    (step, epoch, iteration, samples seen) is what `summarize` (the saver's own) finds in the states read: a manifest
    is evidence, not truth. One edited to claim a later step would otherwise be resumed as the newest, silently
    losing the work of the checkpoints it passed."""
    manifest = getattr(states, "manifest", None)
    if manifest is None:
        return
    recorded, found = manifest["summary"], summarize(states)
    differ = [
        f"{key} {recorded[key]} (the state read: {found[key]})"
        for key in SUMMARY_COUNTERS
        if key in recorded and key in found and recorded[key] != found[key]
    ]
    if differ:
        raise CheckpointCorrupted(
            f"Checkpoint {states.source}: its manifest records {', '.join(differ)}. The manifest was edited or "
            "belongs to another checkpoint, so it is not trusted and nothing was loaded."
        )


def _corrupted(url: str | os.PathLike, error: Exception) -> CheckpointCorrupted:
    return CheckpointCorrupted(
        f"Checkpoint file {os.fspath(url)} could not be read ({type(error).__name__}: {gist(error)}). It is "
        "truncated or corrupted, or was not written by torch.save. Nothing was loaded; load an earlier checkpoint "
        "instead."
    )
