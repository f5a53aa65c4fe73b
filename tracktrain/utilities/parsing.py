"""Lightning's `utilities.parsing`: `AttributeDict` (the type of a module's `hparams`) and `is_picklable`."""

from __future__ import annotations

import pickle
from typing import Any

from tracktrain.trainer.hparams import AttributeDict

__all__ = ["AttributeDict", "is_picklable"]


def is_picklable(obj: Any) -> bool:
    """Whether `obj` can be pickled (what a checkpoint or a spawned process needs)."""
    try:
        pickle.dumps(obj)
    except (pickle.PickleError, AttributeError, RecursionError, TypeError):
        return False
    return True
