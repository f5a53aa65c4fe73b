"""Fixtures for the tests of benchmarks/*.py: the scripts' modules as `python benchmarks/<script>.py` imports them,
and the check that a measured number is a usable one."""

from __future__ import annotations

import gc
import importlib
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def load_benchmark(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., SimpleNamespace]]:
    """`load_benchmark("bench_x", "x_helpers", ...)`: the names of those modules of benchmarks/ in one namespace (the
    first module that defines a name wins), imported with benchmarks/ first on sys.path as the scripts are run. The
    modules imported here are forgotten afterwards: their names (`harness`, `workloads`) are generic."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    before = set(sys.modules)

    def load(*names: str) -> SimpleNamespace:
        merged: dict[str, object] = {}
        for name in names:
            for key, value in vars(importlib.import_module(name)).items():
                merged.setdefault(key, value)
        return SimpleNamespace(**merged)

    yield load
    for name in set(sys.modules) - before:
        module_file = getattr(sys.modules[name], "__file__", None) or ""
        if Path(module_file).parent == BENCHMARKS:
            del sys.modules[name]


@pytest.fixture
def positive() -> Callable[[object], bool]:
    """A finite number above zero (a time, a rate)."""
    return lambda value: isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@pytest.fixture
def run_script(
    load_benchmark: Callable[..., SimpleNamespace],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[Callable[..., tuple[int, str]]]:
    """`run_script("bench_x", "--quick", ...)`: the script's `main` as `python benchmarks/bench_x.py --quick ...` runs
    it, but in this process (no interpreter, torch or peer library to start again), in `tmp_path`; its exit status
    and what it printed (stdout, then stderr). The process settings the harness makes for timing (torch's thread count, flushed
    denormals, the collector's frozen objects) are undone afterwards."""
    threads = torch.get_num_threads()
    monkeypatch.chdir(tmp_path)

    def run(name: str, *argv: str) -> tuple[int, str]:
        monkeypatch.setattr(sys, "argv", [str(BENCHMARKS / f"{name}.py"), *argv])  # the command the report prints
        status = load_benchmark(name).main(list(argv))
        printed = capsys.readouterr()
        return status, printed.out + printed.err

    yield run
    torch.set_num_threads(threads)
    torch.set_flush_denormal(False)
    gc.unfreeze()
