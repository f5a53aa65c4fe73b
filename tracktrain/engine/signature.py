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


def check_signature(
    fn: Callable, description: str, args: tuple = (), kwargs: dict | None = None, hint: str = ""
) -> None:
    """Raise a ValueError naming `fn`, its parameters and the arguments it will get, if they do not bind.

    The message starts with Ignite's words (users and their tests match on them), then says the fix.
    """
    kwargs = kwargs or {}
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        passed = list(args) + list(kwargs)
        raise ValueError(
            f"Error adding {fn} '{description}': takes parameters {list(signature.parameters)} but will be "
            f"called with {passed}({exc}). {hint or 'Change its signature to accept these arguments.'}"
        ) from None
