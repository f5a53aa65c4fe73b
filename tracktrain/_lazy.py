"""Module attributes loaded on first use (PEP 562), so importing a package does not import torch and friends; and
names another framework has there that we do not offer, refused with what to use."""

from __future__ import annotations

import dis
import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

_IMPORT_FROM = dis.opmap["IMPORT_FROM"]


def lazy_attributes(
    package: str,
    namespace: dict[str, Any],
    names_to_modules: Mapping[str, str],
    refused: Mapping[str, str] | Callable[[str], str | None] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package`: each name in `names_to_modules` is imported from its module the
    first time it is read, then cached in the package's `namespace` (its `globals()`).

    `refused` (a mapping, or a function of the name) gives, for a name we do not offer, the message that says what to
    use instead: `from package import Name` then raises an ImportError with it (Python would drop an
    AttributeError's message there), `package.Name` an AttributeError (so `hasattr` stays False)."""

    def __getattr__(name: str) -> Any:
        module = names_to_modules.get(name)
        if module is None:
            message = refused(name) if callable(refused) else (refused or {}).get(name)
            if message is None:
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
            caller = sys._getframe(1)
            if caller.f_code.co_code[caller.f_lasti] == _IMPORT_FROM:
                raise ImportError(message, name=package)
            raise AttributeError(message)
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace.get("__all__", ())) | set(names_to_modules))

    return __getattr__, __dir__
