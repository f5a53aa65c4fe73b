"""A module's hyperparameters as Lightning keeps them: `save_hyperparameters()` in `__init__` captures the init
arguments into `hparams`, an `AttributeDict` (`self.hparams.lr`). The Trainer saves a module's with every checkpoint
(the run's settings, compared on resume), the loggers record them, and `LoopModule.load_from_checkpoint` rebuilds the
module from them. `HyperparametersMixin` is the one implementation, for `LoopModule` and `DataModule` alike."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import Any

__all__ = ["AttributeDict", "HyperparametersMixin", "init_arguments"]


class AttributeDict(dict):
    """A dict whose keys read and write as attributes too: `hparams.lr` is `hparams["lr"]`."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(
                f"No hyperparameter {name!r}; the module's hparams are {sorted(self)}. save_hyperparameters() in "
                "__init__ captures the init arguments (all, or the names given, less ignore=)."
            ) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        del self[name]


def init_arguments(
    instance: object, frame: FrameType | None, names: Sequence[str], ignore: str | Sequence[str] | None
) -> dict[str, Any]:
    """The arguments of the `__init__` calls of `instance` running at `frame` and the frames above it (a subclass's
    `__init__` calling its base's: the subclass's values win), `**kwargs` spread; only `names` when given, less
    `ignore`. Raises when `frame` is not inside an `__init__` of `instance`."""
    collected: dict[str, Any] = {}
    inside = False  # whether `frame` is an `__init__` of `instance` (one without arguments collects none)
    while frame is not None and frame.f_code.co_name == "__init__":
        info = inspect.getargvalues(frame)
        if not info.args or info.locals.get(info.args[0]) is not instance:
            break
        inside = True
        found = {name: info.locals[name] for name in info.args[1:] if name in info.locals}
        if info.varargs and info.locals.get(info.varargs):
            found[info.varargs] = info.locals[info.varargs]
        if info.keywords:
            found.update(info.locals.get(info.keywords) or {})
        collected = {**found, **collected}  # outer frames are the subclasses: theirs win
        frame = frame.f_back
    if not inside:
        raise RuntimeError(
            f"save_hyperparameters() captures the arguments of {type(instance).__name__}.__init__, so call it there "
            "(it was called from elsewhere); to set hparams by hand, assign a dict: self.hparams = {...}."
        )
    ignored = {ignore} if isinstance(ignore, str) else set(ignore or ())
    for name in [*names, *ignored]:
        if not isinstance(name, str):
            raise TypeError(f"save_hyperparameters() takes argument names (str), got {name!r}.")
    if names:
        missing = sorted(set(names) - collected.keys())
        if missing:
            raise ValueError(
                f"save_hyperparameters({', '.join(map(repr, names))}): {missing} are not arguments of "
                f"{type(instance).__name__}.__init__ (its arguments: {sorted(collected)})."
            )
        collected = {name: collected[name] for name in names}
    return {name: value for name, value in collected.items() if name not in ignored and name != "__class__"}


class HyperparametersMixin:
    """`save_hyperparameters()` and `hparams`, as Lightning's `LightningModule` and `LightningDataModule` have them."""

    def save_hyperparameters(
        self,
        *names: str,
        ignore: str | Sequence[str] | None = None,
        frame: FrameType | None = None,
        logger: bool = True,
    ) -> None:
        """Call in `__init__`: keep its arguments (all of them, or those `names`, less `ignore`) in `self.hparams`,
        as Lightning does. A module's are saved with every checkpoint, logged by the trackers, compared when a fit
        resumes, and `load_from_checkpoint` rebuilds the module from them. `frame`: the `__init__` frame to read
        them from (Lightning's; default: the caller's). `logger=False`: kept and checkpointed, not sent to the
        trackers."""
        if not isinstance(logger, bool):
            raise TypeError(f"save_hyperparameters(logger=...) is True or False, got {logger!r}.")
        if frame is None:
            current = inspect.currentframe()
            frame = current.f_back if current else None
        self._hparams = AttributeDict(init_arguments(self, frame, names, ignore))
        self.__dict__["_hparams_to_loggers"] = logger

    @property
    def hparams_to_loggers(self) -> bool:
        """Whether the trackers record these hparams (`save_hyperparameters(logger=False)`: not)."""
        return bool(self.__dict__.get("_hparams_to_loggers", True))

    @property
    def hparams(self) -> AttributeDict:
        """The hyperparameters (`self.hparams.lr`): what `save_hyperparameters()` kept, or a dict assigned."""
        hparams = self.__dict__.get("_hparams")
        if hparams is None:  # a subclass whose __init__ did not call its base's
            hparams = self._hparams = AttributeDict()
        return hparams

    @hparams.setter
    def hparams(self, values: Mapping[str, Any]) -> None:
        if not isinstance(values, Mapping):
            raise TypeError(f"hparams must be a mapping of name -> value, got {type(values).__name__}: {values!r}.")
        self._hparams = AttributeDict(values)
