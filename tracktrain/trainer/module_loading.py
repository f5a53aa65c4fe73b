"""`LoopModule.load_from_checkpoint`: a trained module back from a checkpoint a Trainer wrote — rebuilt from the
hparams the checkpoint saved (`save_hyperparameters`), its weights loaded, in eval mode — from one file or a sharded
`.dcp` directory, at any fsspec URL. The checkpoint is read as every other reader of the project reads it
(`read_model_checkpoint`, the manifest checked; a sharded one read whole into this process) and loaded with
`Checkpoint.load_objects` (keys and shapes checked before anything loads). `load_weights` is that reading and loading
alone, into a module that exists (`Trainer.test(ckpt_path=...)`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, TypeVar

import torch
from torch import nn

__all__ = ["class_path", "load_module", "load_weights"]

M = TypeVar("M", bound=nn.Module)


def class_path(cls: type) -> str:
    """`package.module:Qualified.Name`, what a checkpoint records of its module's class."""
    return f"{cls.__module__}:{cls.__qualname__}"


def load_module(
    cls: type[M],
    checkpoint_path: Any,
    map_location: str | torch.device | None,
    strict: bool,
    overrides: Mapping[str, Any],
    base: type,
) -> M:
    """`cls` built from the checkpoint's hparams (updated with `overrides`) and holding its weights, in eval mode;
    with `cls` the `base` class itself, the class the checkpoint records."""
    from tracktrain.checkpoint.state import read_model_checkpoint

    path = os.fspath(checkpoint_path) if isinstance(checkpoint_path, (str, os.PathLike)) else None
    if not isinstance(path, str) or not path.strip():
        raise TypeError(
            f"{cls.__name__}.load_from_checkpoint(checkpoint_path=...) takes a checkpoint's path or fsspec URL (a "
            f"non-empty str or os.PathLike), got {checkpoint_path!r}."
        )
    if map_location is not None and not isinstance(map_location, (str, torch.device)):
        raise TypeError(
            f'load_from_checkpoint(map_location=...) takes a device ("cpu", "cuda:0", torch.device) or None, got '
            f"{map_location!r}; to move parts elsewhere, load on the CPU and move them yourself."
        )
    states = read_model_checkpoint(path)
    trainer_state = states.get("trainer") or {}
    saved_hparams = dict((trainer_state.get("settings") or {}).get("module") or {})
    if cls is base:
        cls = _saved_class(trainer_state.get("module_class"), path, base)
    hparams = {**saved_hparams, **overrides}
    try:
        module = cls(**hparams)
    except TypeError as error:
        raise TypeError(
            f"Could not rebuild {cls.__name__}(**{hparams!r}) from the hparams of {path}: {error}. Arguments the "
            "checkpoint lacks (its module did not save_hyperparameters() them) or that changed: pass them as "
            f"{cls.__name__}.load_from_checkpoint(path, name=value)."
        ) from error
    _load_model_state(module, states, strict)
    if map_location is not None:
        module.to(map_location)
    return module.eval()


def load_weights(module: nn.Module, checkpoint_path: str, strict: bool = True) -> None:
    """The model weights of the checkpoint at `checkpoint_path` (a path or fsspec URL) loaded into `module`, as
    `load_from_checkpoint` loads them: a mismatch of keys or shapes raises before anything loads."""
    from tracktrain.checkpoint.state import read_model_checkpoint

    _load_model_state(module, read_model_checkpoint(checkpoint_path), strict)


def _load_model_state(module: nn.Module, states: Mapping[str, Any], strict: bool) -> None:
    from tracktrain.checkpoint.handler import Checkpoint

    Checkpoint.load_objects({"model": module}, {"model": states["model"]}, strict=bool(strict))


def _saved_class(recorded: Any, path: str, base: type) -> Any:
    """The class `recorded` (`class_path`) names, among the subclasses of `base` this process has imported. Never
    imported on the checkpoint's word: a file could otherwise choose which module's code runs."""
    fix = (
        f"call load_from_checkpoint on your module's class (MyModule.load_from_checkpoint({os.path.basename(path)!r}))"
    )
    if not isinstance(recorded, str) or ":" not in recorded:
        raise TypeError(f"Checkpoint {path} does not record its module's class: {fix}.")
    found = next((subclass for subclass in _subclasses(base) if class_path(subclass) == recorded), None)
    if found is None:
        module_name = recorded.split(":", 1)[0]
        raise TypeError(
            f"Checkpoint {path} was written for {recorded}, which is not a {base.__name__} this program has imported: "
            f"{fix}, or import {module_name} first. (A checkpoint never chooses a module to import: that could run "
            "code it names; docs/security.md.)"
        )
    return found


def _subclasses(base: type) -> list[type]:
    found: list[type] = []
    pending: list[type] = list(base.__subclasses__())
    while pending:
        subclass = pending.pop()
        if subclass not in found:
            found.append(subclass)
            pending.extend(subclass.__subclasses__())
    return found
