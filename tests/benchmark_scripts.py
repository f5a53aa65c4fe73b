"""What the tests of benchmarks/*.py share: loading a script as `python benchmarks/<script>.py` would, and the
check that a measured number is a usable one."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(monkeypatch: pytest.MonkeyPatch, name: str) -> ModuleType:
    """benchmarks/<name>.py as a module, with benchmarks/ first on sys.path (the script imports `_common`)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def positive(value: object) -> bool:
    """A finite number above zero (a time, a rate)."""
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0
