"""Ignite 0.5.5's public names, walked at every module path an Ignite program imports: each is ours under the same
path (a class where Ignite's is one, a callable where Ignite's is), or refused with a message naming what to use
(`tracktrain.ignite_names`). A name Ignite adds fails this until it is classified."""

from __future__ import annotations

import importlib
import inspect
import types

import pytest

from tracktrain.ignite_names import NOT_OFFERED, TRACKER_MODULES

pytest.importorskip("ignite")

# the module paths of Ignite's API that programs import (issue 48), and the others examples reach
MODULES = [
    "engine",
    "handlers",
    "handlers.param_scheduler",
    "handlers.tensorboard_logger",
    "handlers.mlflow_logger",
    "handlers.wandb_logger",
    "handlers.time_profilers",
    "handlers.lr_finder",
    "handlers.base_logger",
    "handlers.logger_utils",
    "handlers.checkpoint",
    "handlers.early_stopping",
    "handlers.terminate_on_nan",
    "handlers.timing",
    "handlers.tqdm_logger",
    "handlers.time_limit",
    "handlers.stores",
    "handlers.visdom_logger",
    "handlers.neptune_logger",
    "handlers.clearml_logger",
    "handlers.polyaxon_logger",
    "metrics",
    "metrics.gpu_info",
    "utils",
    "distributed",
    "contrib.engines.common",
    "contrib.handlers",
]


def public_names(module: types.ModuleType) -> list[str]:
    """`__all__` where the module has one; else, for a package, what it offers (`ignite.distributed` gathers its
    submodules' names), for a module what it defines itself; never submodules or private names."""
    names = getattr(module, "__all__", None)
    if names is None and hasattr(module, "__path__"):
        names = list(vars(module))
    elif names is None:
        names = [name for name, value in vars(module).items() if getattr(value, "__module__", None) == module.__name__]
    return sorted(n for n in names if not n.startswith("_") and not inspect.ismodule(getattr(module, n, None)))


CASES = [(path, name) for path in MODULES for name in public_names(importlib.import_module(f"ignite.{path}"))]


def _ours(path: str) -> types.ModuleType:
    aliases = {"handlers.tqdm_logger": "handlers.progress"}  # Ignite's module name of the ProgressBar
    return importlib.import_module(f"tracktrain.{aliases.get(path, path)}")


@pytest.mark.parametrize(("path", "name"), CASES, ids=[f"{p}.{n}" for p, n in CASES])
def test_each_public_name_is_ours_or_refused_with_what_to_use(path, name):
    theirs = getattr(importlib.import_module(f"ignite.{path}"), name)
    module = _ours(path)
    package = module.__name__
    refused = NOT_OFFERED.get(package, {}).get(name) or package in TRACKER_MODULES
    if not refused:
        ours = getattr(module, name)  # an AttributeError here: neither offered nor refused
        if inspect.isclass(theirs):
            assert inspect.isclass(ours), f"tracktrain.{path}.{name} should be a class, as Ignite's"
        elif callable(theirs):
            assert callable(ours), f"tracktrain.{path}.{name} should be callable, as Ignite's"
        return
    with pytest.raises(AttributeError, match=rf"has no {name}\b.*Ignite's.*: .{{20,}}"):
        getattr(module, name)
    with pytest.raises(ImportError, match=rf"has no {name}\b.*Ignite's"):
        exec(f"from {package} import {name}", {})
    assert not hasattr(module, name)


def test_the_refusals_are_ignites_names_and_not_ours():
    walked = {(f"tracktrain.{path}", name) for path, name in CASES}
    for package, names in NOT_OFFERED.items():
        for name in names:
            assert (package, name) in walked, f"{package}.{name} is refused but Ignite has no such public name there"
            assert name not in getattr(importlib.import_module(package), "_LAZY", {}), f"{package}.{name} is offered"
