"""Checks, once at registration time, that a callable accepts the arguments it will be called with."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


def accepts(fn: Callable, *args: Any, **kwargs: Any) -> bool:
    """Whether `fn(*args, **kwargs)` binds. Callables without an inspectable signature are assumed to."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have no signature; let the call itself decide
        return True
    try:
        signature.bind(*args, **kwargs)
    except TypeError:
        return False
    return True


def check_signature(fn: Callable, description: str, *args: Any, **kwargs: Any) -> None:
    """Raise a ValueError naming `fn`, its parameters and the arguments it will get, if they do not bind."""
    if accepts(fn, *args, **kwargs):
        return
    params = list(inspect.signature(fn).parameters)
    passed = [_describe(a) for a in args] + [f"{k}=" for k in kwargs]
    raise ValueError(
        f"The {description} {fn!r} takes parameters {params} but will be called with {passed}. Change its "
        "signature to accept these arguments."
    )


def _describe(arg: Any) -> str:
    if isinstance(arg, str):
        return arg
    return type(arg).__name__
