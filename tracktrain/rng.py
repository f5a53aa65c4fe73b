"""Seeding and capturing every random number generator a training run draws from (python, numpy, torch, CUDA)."""

from __future__ import annotations

import functools
import os
import random
from collections.abc import Callable
from typing import Any

import torch


@functools.cache  # numpy is installed or not for the whole process: looked up once, not at every seeding
def _numpy() -> Any:
    try:
        import numpy  # optional for tracktrain: its generator is seeded and saved only where it is installed
    except ImportError:
        return None
    return numpy


def manual_seed(seed: int) -> None:
    """Seed python's `random`, torch (CPU and every accelerator's devices) and numpy's global generator.

    A DeterministicEngine/ResumableEngine calls this for every batch, so it is kept cheap: `torch.manual_seed` also
    queues a seed for each accelerator backend that is compiled in but not started (XPU and MTIA on a CUDA machine,
    CUDA on a CPU one), formatting a stack trace for each, ~130-450 µs per call here and the larger part of the
    Trainer's step overhead on a GPU host. Only the generators of the backends this process can use are seeded
    instead (the same seeds torch.manual_seed sets on them): on a machine with none, only the CPU generator (~1 µs)."""
    random.seed(seed)
    torch.default_generator.manual_seed(seed)
    for seed_backend in _accelerator_seeders():
        seed_backend(seed)
    numpy = _numpy()
    if numpy is not None:
        numpy.random.seed(seed % 2**32)


#: where `seed_everything` records its seed, Lightning's name for it: a Trainer given no seed takes it for its run
#: (the data order included), and processes started from this one (DDP ranks, workers) see it
GLOBAL_SEED_VARIABLE = "PL_GLOBAL_SEED"


def seed_everything(seed: int | None = None, workers: bool = False, verbose: bool = True) -> int:
    """Lightning's `seed_everything`: seed python, numpy and torch (every device) with `seed` (`manual_seed`), record
    it (`PL_GLOBAL_SEED`, as Lightning does) and return it; None draws one (and logs it, so the run can be repeated).
    A `Trainer` given no `seed=` then runs with this one, its data order included, so a script that seeds
    everything and then fits repeats itself. `workers`: Lightning's seeding of DataLoader workers, which the
    Trainer always does here (every pass over the data and each worker are seeded from the run's seed). `verbose`:
    log the seed, as Lightning does ("Seed set to 42")."""
    import logging

    if seed is None:
        seed = int.from_bytes(os.urandom(4), "little") >> 1
        logging.getLogger(__name__).warning("seed_everything: no seed given, seed set to %d.", seed)
    elif verbose:
        logging.getLogger(__name__).info("Seed set to %d", seed)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ValueError(f"seed_everything(seed=...) takes an int from 0 to 2**63 - 1 (or None: drawn), got {seed!r}.")
    if not isinstance(workers, bool):
        raise TypeError(f"seed_everything(workers=...) is True or False, got {workers!r}.")
    manual_seed(seed)
    os.environ[GLOBAL_SEED_VARIABLE] = str(seed)
    return seed


def global_seed() -> int | None:
    """The seed `seed_everything` recorded (in this process or the one that started it), None when there is none."""
    value = os.environ.get(GLOBAL_SEED_VARIABLE)
    if value is None:
        return None
    try:
        seed = int(value)
    except ValueError:
        raise ValueError(
            f"{GLOBAL_SEED_VARIABLE}={value!r} in the environment is not a seed: an int from 0 to 2**63 - 1 "
            "(seed_everything(seed) sets it). Unset it, or set it to a seed."
        ) from None
    return seed


@functools.cache  # which accelerators a process can use does not change while it runs
def _accelerator_seeders() -> tuple[Callable[[int], Any], ...]:
    """What `torch.manual_seed` seeds besides the CPU generator, for the backends that are available only."""
    custom = torch._C._get_privateuse1_backend_name()
    if custom != "privateuseone" and hasattr(torch, custom):
        return (torch.manual_seed,)  # an out-of-tree backend: torch's own seeding, which knows how to reach it
    seeders: list[Callable[[int], Any]] = []
    if torch.cuda.is_available():
        seeders.append(torch.cuda.manual_seed_all)  # every device's generator (queued until CUDA starts)
    if torch.backends.mps.is_available():
        seeders.append(torch.mps.manual_seed)
    for name in ("xpu", "mtia"):
        backend = getattr(torch, name, None)
        if backend is not None and backend.is_available():
            seeders.append(backend.manual_seed_all)
    return tuple(seeders)


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
