"""The quick checks a person runs before a real fit: `Trainer(fast_dev_run=N)` (N batches of every stage, to find
a bug in the steps in seconds, leaving nothing behind) and `Trainer(overfit_batches=N)` (the same few training
batches every epoch, in order: a model that cannot overfit them has a bug)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from typing import Any

from torch.utils.data import DataLoader, Subset

from tracktrain.trainer import arguments
from tracktrain.trainer.batches import loader_length

__all__ = ["check_fast_dev_run", "fast_dev_run_settings", "first_batches"]


def check_fast_dev_run(value: Any) -> int:
    """`fast_dev_run`: False/0 (off), True (1 batch) or a number of batches."""
    if value is True:
        return 1
    if value is False or value is None:
        return 0
    return arguments.check_positive_int("fast_dev_run", value)


def fast_dev_run_settings(batches: int) -> dict[str, Any]:
    """The Trainer's arguments `fast_dev_run=batches` sets: that many batches of each stage in one epoch, and no
    checkpoints, trackers or resume, so that it leaves nothing behind a real run could mistake for its own."""
    return {
        "max_epochs": 1,
        "max_steps": None,
        "val_check_interval": None,
        "val_every_n_epochs": 1,
        "limits": dict.fromkeys(("fit", "validate", "test", "predict"), batches),
        "loggers": False,
        "enable_checkpointing": False,
        "resume": None,
    }


def first_batches(loader: Iterable[Any], count: int | float) -> Iterable[Any]:
    """The first `count` batches of `loader` (a fraction: of its length), in order, as a loader that gives the same
    ones every epoch (`overfit_batches`): a DataLoader over those samples, read unshuffled; another iterable's
    batches, kept."""
    length = loader_length(loader)
    if isinstance(count, float):
        if length is None:
            raise ValueError(
                f"Trainer(overfit_batches={count}) is a fraction of the loader, but this loader has no length: give a "
                "number of batches."
            )
        count = max(1, math.ceil(count * length))
    if not isinstance(loader, DataLoader) or loader.batch_size is None:
        return list(itertools.islice(loader, count))
    first = Subset(loader.dataset, range(min(count * loader.batch_size, len(loader.dataset))))  # type: ignore[arg-type]
    return DataLoader(
        first,
        batch_size=loader.batch_size,
        collate_fn=loader.collate_fn,
        num_workers=loader.num_workers,
        pin_memory=loader.pin_memory,
    )
