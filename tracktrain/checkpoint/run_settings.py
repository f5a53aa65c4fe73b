"""A run's settings — the module's class and `hparams`, and the Trainer's arguments — saved in every checkpoint and
compared when a fit resumes, so a changed setting is never silently ignored (or silently applied).

The same dict is what the loggers record as the run's hyperparameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tracktrain.params import flatten_params

__all__ = ["ResumeMismatch", "changed_settings", "check_resumable", "run_settings"]

# the part of the settings that makes a checkpoint another model (its class, its hparams): resuming it needs
# Trainer(resume_with_changes=True)
_MODEL_PART = "module"


class ResumeMismatch(ValueError):
    """The checkpoint a fit would resume was written for another module class or other module hyperparameters."""


def run_settings(module: Any, trainer_settings: Mapping[str, Any]) -> dict[str, Any]:
    """The module's `hparams` (when it has a mapping of them), its class, and the Trainer's settings as given (its
    arguments, with the seed the run uses), as plain data."""
    settings: dict[str, Any] = {}
    hparams = getattr(module, "hparams", None)
    if isinstance(hparams, Mapping):
        settings["module"] = dict(hparams)
    settings["module/class"] = type(module).__qualname__
    settings["trainer"] = dict(trainer_settings)
    return _plain(settings)


def changed_settings(saved: Mapping[str, Any] | None, current: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """`{"trainer/max_epochs": (old, new), ...}` for every leaf that differs (absent on one side: None)."""
    if not saved:
        return {}  # a checkpoint from before settings were saved: nothing to compare with
    old, new = flatten_params(saved), flatten_params(current)  # the keys the loggers' params have
    return {
        key: (old.get(key), new.get(key))
        for key in sorted(old.keys() | new.keys())
        if _comparable(old.get(key)) != _comparable(new.get(key))
    }


def check_resumable(changes: Mapping[str, tuple[Any, Any]], checkpoint: str, allowed: bool) -> None:
    """ResumeMismatch unless `allowed` when the module's class or hyperparameters changed; what changed, either way,
    is the caller's to report."""
    model_changes = {key: change for key, change in changes.items() if key.split("/", 1)[0] == _MODEL_PART}
    if model_changes and not allowed:
        raise ResumeMismatch(
            f"Not resuming {checkpoint}: it was written for other module settings ({describe(model_changes)}). "
            "To continue that run with the new settings anyway, pass Trainer(resume_with_changes=True); to start a "
            "new run, use another default_root_dir (or checkpoint dirpath), or resume=None."
        )


def describe(changes: Mapping[str, tuple[Any, Any]]) -> str:
    return "; ".join(f"{key}: {old!r} -> {new!r}" for key, (old, new) in changes.items())


def _plain(value: Any) -> Any:
    """`value` as plain data (what a checkpoint read with weights_only=True, and every tracker, takes): other
    objects (a dtype, a Path, ...) become their text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, tuple):  # kept a tuple: a module rebuilt from its hparams gets what it was given
        return tuple(_plain(item) for item in value)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return str(value)


def _comparable(value: Any) -> Any:
    """A setting as compared on resume: a tuple equal to the list of its items (checkpoints before tuples were kept
    hold lists), recursively."""
    if isinstance(value, (list, tuple)):
        return [_comparable(item) for item in value]
    return value
