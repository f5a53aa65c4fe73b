"""Seeding and capturing every random number generator a training run draws from (python, numpy, torch, CUDA)."""

from __future__ import annotations

import random
from typing import Any

import torch


def _numpy_random() -> Any:
    try:
        import numpy.random  # numpy is optional for tracktrain; seed it only where it is installed
    except ImportError:
        return None
    return numpy.random


def manual_seed(seed: int) -> None:
    """Seed python's `random`, torch (CPU and every CUDA device) and numpy's global generator."""
    random.seed(seed)
    torch.manual_seed(seed)
    np_random = _numpy_random()
    if np_random is not None:
        np_random.seed(seed % 2**32)


def get_rng_states() -> dict[str, Any]:
    """A picklable snapshot of every global generator, for `set_rng_states`."""
    states: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    np_random = _numpy_random()
    if np_random is not None:
        states["numpy"] = np_random.get_state()
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
    np_random = _numpy_random()
    if "numpy" in states and np_random is not None:
        np_random.set_state(states["numpy"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
