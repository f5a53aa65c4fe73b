"""Lightning's `utilities.imports`: whether optional packages are installed, under the names Lightning's examples
read (`if _TORCHVISION_AVAILABLE: ...`). Each is looked up, not imported (`importlib.util.find_spec`)."""

from __future__ import annotations

import importlib.util
import sys

import torch

__all__ = [
    "_OMEGACONF_AVAILABLE",
    "_PYTHON_GREATER_EQUAL_3_11_0",
    "_RICH_AVAILABLE",
    "_TORCHVISION_AVAILABLE",
    "_TORCH_GREATER_EQUAL_2_6",
    "_TORCH_GREATER_EQUAL_2_8",
    "module_available",
]


def module_available(name: str) -> bool:
    """Whether the module `name` (dotted names too) can be imported, without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a dotted name whose package is missing
        return False


def _torch_at_least(major: int, minor: int) -> bool:
    release = torch.__version__.split("+")[0].split(".")
    return (int(release[0]), int(release[1])) >= (major, minor)


_TORCHVISION_AVAILABLE = module_available("torchvision")
_RICH_AVAILABLE = module_available("rich")
_OMEGACONF_AVAILABLE = module_available("omegaconf")
_PYTHON_GREATER_EQUAL_3_11_0 = sys.version_info >= (3, 11)
_TORCH_GREATER_EQUAL_2_6 = _torch_at_least(2, 6)
_TORCH_GREATER_EQUAL_2_8 = _torch_at_least(2, 8)
