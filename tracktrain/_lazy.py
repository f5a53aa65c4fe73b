"""Module attributes loaded on first use (PEP 562), so importing a package does not import torch and friends."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(
    package: str, namespace: dict[str, Any], names_to_modules: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package`: each name in `names_to_modules` is imported from its module the
    first time it is read, then cached in the package's `namespace` (its `globals()`)."""

    def __getattr__(name: str) -> Any:
        module = names_to_modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace.get("__all__", ())) | set(names_to_modules))

    return __getattr__, __dir__
