"""Seeding and capturing every random number generator a training run draws from (python, numpy, torch, CUDA)."""

from __future__ import annotations

import functools
import random
from typing import Any

import torch


def _numpy() -> Any:
    try:
        import numpy  # optional for tracktrain: its generator is seeded and saved only where it is installed
    except ImportError:
        return None
    return numpy


def manual_seed(seed: int) -> None:
    """Seed python's `random`, torch (CPU and every accelerator's devices) and numpy's global generator.

    A DeterministicEngine/ResumableEngine calls this for every batch, so it is kept cheap: `torch.manual_seed` also
    queues a seed for each accelerator backend that is not started, formatting a stack trace for each (~200 µs
    per call); on a machine with none, only the CPU generator exists to seed (~3 µs)."""
    random.seed(seed)
    if _has_accelerator():
        torch.manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)
    numpy = _numpy()
    if numpy is not None:
        numpy.random.seed(seed % 2**32)


@functools.cache  # which accelerators a process can use does not change while it runs
def _has_accelerator() -> bool:
    xpu = getattr(torch, "xpu", None)
    return torch.cuda.is_available() or torch.backends.mps.is_available() or (xpu is not None and xpu.is_available())


def get_rng_states() -> dict[str, Any]:
    """A snapshot of every global generator, for `set_rng_states`.

    Plain data and tensors only, so that `torch.load` with its default `weights_only=True` reads it back.
    """
    states: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    numpy = _numpy()
    if numpy is not None:
        kind, keys, position, has_gauss, cached_gaussian = numpy.random.get_state()
        states["numpy"] = (kind, keys.tolist(), int(position), int(has_gauss), float(cached_gaussian))
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore a snapshot taken by `get_rng_states`."""
    if not isinstance(states, dict) or "torch" not in states:
        raise ValueError(
            f"rng_states must be a dict returned by tracktrain.rng.get_rng_states(), got {type(states).__name__}."
        )
    random.setstate(states["python"])
    torch.set_rng_state(states["torch"].cpu())
    numpy = _numpy()
    if "numpy" in states and numpy is not None:
        kind, keys, position, has_gauss, cached_gaussian = states["numpy"]
        numpy.random.set_state((kind, numpy.asarray(keys, dtype=numpy.uint32), position, has_gauss, cached_gaussian))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
