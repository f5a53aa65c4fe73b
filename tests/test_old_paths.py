"""The modules grouped into packages (issue 34) keep their old public paths: `tracktrain.boundary`,
`tracktrain.preemption` and `tracktrain.export_onnx` re-export the moved modules' names, and `tracktrain.distributed`
re-exports its collectives (`tracktrain.distributed.spawn`), so code written against the old paths still runs."""

from __future__ import annotations

import importlib

import pytest

OLD_TO_NEW = {
    "tracktrain.boundary": "tracktrain.distributed.boundary",
    "tracktrain.preemption": "tracktrain.distributed.preemption",
    "tracktrain.export_onnx": "tracktrain.export.onnx",
    "tracktrain.distributed": "tracktrain.distributed.collectives",
}


@pytest.mark.parametrize(("old", "new"), sorted(OLD_TO_NEW.items()))
def test_an_old_path_names_the_same_objects(old: str, new: str):
    old_module, new_module = importlib.import_module(old), importlib.import_module(new)
    assert old_module.__all__ and set(new_module.__all__) <= set(old_module.__all__)
    for name in new_module.__all__:
        assert getattr(old_module, name) is getattr(new_module, name), f"{old}.{name}"


def test_the_documented_names():
    from tracktrain.boundary import Decision, decide
    from tracktrain.distributed import spawn
    from tracktrain.export import export_module
    from tracktrain.export_onnx import export_onnx
    from tracktrain.preemption import Terminated
    from tracktrain.rng import manual_seed

    assert issubclass(Terminated, BaseException)
    assert all(callable(name) for name in (Decision, decide, spawn, export_module, export_onnx, manual_seed))


def test_the_distributed_package_offers_exactly_the_collectives_and_idists_public_names():
    """`tracktrain/distributed/__init__` lists the collectives' names and Ignite's idist names itself (it must not
    import torch): the lists are one public API and stay equal."""
    import tracktrain.distributed as package
    from tracktrain.distributed import collectives, ignite_api

    assert sorted(package.__all__) == sorted(set(collectives.__all__) | set(ignite_api.__all__))
