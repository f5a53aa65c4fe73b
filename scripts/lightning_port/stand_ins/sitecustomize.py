"""The recorder of the Lightning program ports (scripts/lightning_port/port.py): each Trainer the program builds gets
one more callback, which writes a JSON line per training step into $LIGHTNING_PORT_RECORD — the step's loss (what
the training step returned, or under manual optimization the sum of the losses it logged) and a fingerprint of its
batch (the sum of its tensors), so two runs can be compared while they read the same data. It wraps the Trainer of
the library named by $LIGHTNING_PORT_LIB ("lightning" or "tracktrain") when that is imported; the program itself is
not touched ($LIGHTNING_PORT_TRAINER, a JSON object, sets Trainer arguments in both runs, to shorten a long one). Seeds torch, random and numpy with 0 at start-up, so both runs of a program that seeds nothing start
alike; `urllib.request.urlretrieve` fails as a missing file would (nothing is fetched); `tqdm.notebook`'s bars are the
console's (a notebook's widgets need ipywidgets and a front end, neither of which a script run has)."""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import json
import os
import sys
from typing import ClassVar

_RECORD = os.environ.get("LIGHTNING_PORT_RECORD")
_LIB = os.environ.get("LIGHTNING_PORT_LIB")
# the Trainer's module -> the module of its Callback class (Lightning ships as lightning.pytorch and pytorch_lightning)
_TRAINER_MODULES = {
    "lightning": {
        "lightning.pytorch.trainer.trainer": "lightning.pytorch.callbacks",
        "pytorch_lightning.trainer.trainer": "pytorch_lightning.callbacks",
    },
    "tracktrain": {"tracktrain.trainer.trainer": "tracktrain"},
}.get(_LIB or "", {})


def _tensor_sum(value) -> float:
    torch = sys.modules["torch"]
    if isinstance(value, torch.Tensor):
        return float(value.detach().double().sum()) if value.is_floating_point() or not value.is_complex() else 0.0
    if isinstance(value, dict):
        return sum(_tensor_sum(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_tensor_sum(v) for v in value)
    return 0.0


def _loss(outputs, trainer) -> float | None:
    torch = sys.modules["torch"]
    if isinstance(outputs, dict):
        outputs = outputs.get("loss")
    if isinstance(outputs, torch.Tensor):
        return float(outputs.detach().double())
    logged = [
        float(value)
        for name, value in sorted(trainer.callback_metrics.items())
        if "loss" in name
        and "val" not in name
        and not name.endswith("_epoch")
        and getattr(value, "numel", lambda: 1)() == 1
    ]
    return sum(logged) if logged else None


def _recorder(callback_module: str):
    base = importlib.import_module(callback_module).Callback
    out = open(_RECORD, "a", buffering=1)  # noqa: SIM115 - open for the life of the process

    class PortRecorder(base):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            row = {"loss": _loss(outputs, trainer), "batch": float(f"{_tensor_sum(batch):.6g}")}
            out.write(json.dumps(row) + "\n")

    return PortRecorder()


def _wrap(module, callback_module: str):
    original = module.Trainer.__init__

    @functools.wraps(original)  # the signature kept: LightningCLI reads the Trainer's arguments from it
    def __init__(self, *args, **kwargs):
        callbacks = kwargs.get("callbacks")
        if callbacks is None:
            callbacks = []
        elif not isinstance(callbacks, (list, tuple)):
            callbacks = [callbacks]
        kwargs["callbacks"] = [*callbacks, _recorder(callback_module)]
        kwargs.update(json.loads(os.environ.get("LIGHTNING_PORT_TRAINER") or "{}"))
        original(self, *args, **kwargs)

    module.Trainer.__init__ = __init__


class _WrapOnImport(importlib.abc.MetaPathFinder):
    done: ClassVar[set[str]] = set()

    def find_spec(self, name, path=None, target=None):
        if name not in _TRAINER_MODULES or name in self.done:
            return None
        self.done.add(name)
        spec = importlib.util.find_spec(name)
        loader = spec.loader
        exec_module = loader.exec_module

        def load(module):
            exec_module(module)
            _wrap(module, _TRAINER_MODULES[name])

        loader.exec_module = load
        return spec


class _ConsoleTqdm(importlib.abc.MetaPathFinder):
    """`tqdm.notebook` with its `tqdm`, `trange` (and the old `tqdm_notebook`, `tnrange`) the console's."""

    def find_spec(self, name, path=None, target=None):
        if name != "tqdm.notebook":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        exec_module = spec.loader.exec_module

        def load(module):
            exec_module(module)
            from tqdm.std import tqdm, trange

            module.tqdm = module.tqdm_notebook = tqdm
            module.trange = module.tnrange = trange

        spec.loader.exec_module = load
        return spec


if _RECORD and _TRAINER_MODULES:
    sys.meta_path.insert(0, _WrapOnImport())
    sys.meta_path.insert(0, _ConsoleTqdm())
    import random

    random.seed(0)
    try:
        import numpy

        numpy.random.seed(0)
    except ImportError:
        pass
    import torch

    torch.manual_seed(0)

    import urllib.error
    import urllib.request

    def _no_network(url, *args, **kwargs):
        # nothing is fetched at run time: a notebook's "could not download the pretrained files" path is taken
        raise urllib.error.HTTPError(url, 404, "the ports run without the network", None, None)

    urllib.request.urlretrieve = _no_network
