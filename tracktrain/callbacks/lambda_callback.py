"""`LambdaCallback`, Lightning's: a callback made of the functions given for its hooks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tracktrain.callbacks.base import Callback
from tracktrain.trainer.lightning_names import CALLBACK_HOOKS_NOT_CALLED

__all__ = ["LambdaCallback"]


class LambdaCallback(Callback):
    """`LambdaCallback(on_train_epoch_end=lambda trainer, module: ..., ...)`: each function is that hook (with the
    hook's arguments). Only the hooks given are attached, as for a callback class that defines them: the object is
    of a class of its own holding them."""

    def __new__(cls, **hooks: Callable[..., Any]) -> LambdaCallback:
        known = {name for name in dir(Callback) if name.startswith("on_")}
        for name, function in hooks.items():
            if name in CALLBACK_HOOKS_NOT_CALLED:
                raise TypeError(
                    f"LambdaCallback({name}=...): the Trainer calls no {name} hook. Use {CALLBACK_HOOKS_NOT_CALLED[name]}."
                )
            if name not in known:
                raise TypeError(
                    f"LambdaCallback got {name}=..., which is not a Callback hook (they are: {sorted(known)})."
                )
            if not callable(function):
                raise TypeError(f"LambdaCallback({name}=...) takes a function, got {function!r}.")
        methods = {name: _method(function) for name, function in hooks.items()}
        made = type(cls.__name__, (cls,), {**methods, "__qualname__": cls.__qualname__, "__module__": cls.__module__})
        return super().__new__(made)

    def __init__(self, **hooks: Callable[..., Any]) -> None:
        super().__init__()


def _method(function: Callable[..., Any]) -> Callable[..., Any]:
    def hook(self: LambdaCallback, *args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    return hook
