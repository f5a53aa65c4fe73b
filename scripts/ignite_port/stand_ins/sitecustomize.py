"""The recorder of the Ignite example ports (scripts/ignite_port/port.py): every event each Engine fires, in order,
with its counters, and the metrics after the handlers of each COMPLETED and EPOCH_COMPLETED, one JSON line each into
$IGNITE_PORT_RECORD (a rank of a distributed run into $IGNITE_PORT_RECORD.rank<RANK>). It wraps the Engine class of the library named by $IGNITE_PORT_LIB ("ignite" or "tracktrain")
when that is imported; the program itself is not touched. Seeds torch, random and numpy with 0 at start-up, so both
runs of a program that seeds nothing start alike."""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import sys

_RECORD = os.environ.get("IGNITE_PORT_RECORD")
_LIB = os.environ.get("IGNITE_PORT_LIB")
_ENGINE_MODULE = {"ignite": "ignite.engine.engine", "tracktrain": "tracktrain.engine.engine"}.get(_LIB or "")


def _plain(value):
    torch = sys.modules.get("torch")
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if torch is not None and isinstance(value, torch.Tensor):
        return value.detach().cpu().double().tolist()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return f"<{type(value).__name__}>"


def _wrap(module):
    engine_class = module.Engine
    files = {}  # opened at the first event: a spawned rank learns its RANK after it starts
    numbers = {}

    def out():
        if "file" not in files:
            rank = os.environ.get("RANK")
            path = _RECORD if rank is None else f"{_RECORD}.rank{rank}"
            files["file"] = open(path, "a", buffering=1)  # noqa: SIM115 - open for the life of the process
        return files["file"]

    def label(engine):
        return numbers.setdefault(id(engine), len(numbers))

    def record(engine, event, after):
        name = getattr(event, "name", str(event))
        row = {"engine": label(engine), "event": name, "epoch": engine.state.epoch, "iteration": engine.state.iteration}
        if after:
            row["metrics"] = _plain(dict(engine.state.metrics))
        out().write(json.dumps(row) + "\n")

    original = engine_class._fire_event
    fire = getattr(engine_class, "_fire", None)

    def _fire_event(self, event_name, *args, **kwargs):
        if fire is not None and not args and not kwargs:
            return original(self, event_name)  # tracktrain's: through _fire, recorded there
        record(self, event_name, False)
        original(self, event_name, *args, **kwargs)
        if getattr(event_name, "name", None) in ("COMPLETED", "EPOCH_COMPLETED"):
            record(self, event_name, True)

    engine_class._fire_event = _fire_event
    if fire is not None:  # tracktrain's hot path for events without arguments

        def _fire(self, event, key):
            record(self, event, False)
            fire(self, event, key)
            if getattr(event, "name", None) in ("COMPLETED", "EPOCH_COMPLETED"):
                record(self, event, True)

        engine_class._fire = _fire


class _WrapOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != _ENGINE_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = spec.loader
        exec_module = loader.exec_module

        def load(module):
            exec_module(module)
            _wrap(module)

        loader.exec_module = load
        return spec


if _RECORD and _ENGINE_MODULE:
    sys.meta_path.insert(0, _WrapOnImport())
    import random

    random.seed(0)
    try:
        import numpy

        numpy.random.seed(0)
    except ImportError:
        pass
    import torch

    torch.manual_seed(0)
