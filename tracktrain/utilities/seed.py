"""Lightning's `utilities.seed`: `seed_everything` (`tracktrain.rng`'s) and `isolate_rng`, which gives the generators
back as they were after its block."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tracktrain.rng import get_rng_states, seed_everything, set_rng_states

__all__ = ["isolate_rng", "seed_everything"]


@contextlib.contextmanager
def isolate_rng(include_cuda: bool = True) -> Iterator[None]:
    """Run the block with every global generator (python, numpy, torch, CUDA) restored after it, as if it drew
    nothing. `include_cuda=False`: the CUDA generators are left as the block leaves them."""
    states = get_rng_states()
    if not include_cuda:
        states.pop("cuda", None)
    try:
        yield
    finally:
        set_rng_states(states)
