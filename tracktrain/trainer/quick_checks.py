"""The quick checks a person runs before a real fit: `Trainer(fast_dev_run=N)` (N batches of every stage, to find
a bug in the steps in seconds, leaving nothing behind) and `Trainer(overfit_batches=N)` (the same few training
batches every epoch, in order: a model that cannot overfit them has a bug)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from typing import Any

from torch.utils.data import DataLoader, Subset

from tracktrain.distributed.logger import get_dist_logger
from tracktrain.trainer import arguments
from tracktrain.trainer.batches import loader_length
from tracktrain.trainer.surface import Checkpointer

__all__ = ["FastDevRun", "check_fast_dev_run", "first_batches"]


def check_fast_dev_run(value: Any) -> int:
    """`fast_dev_run`: False/0 (off), True (1 batch) or a number of batches."""
    if value is True:
        return 1
    if value is False or value is None:
        return 0
    return arguments.check_positive_int("fast_dev_run", value)


class FastDevRun:
    """What `Trainer(fast_dev_run=batches)` changes of the Trainer's arguments: that many batches of each stage in one
    epoch (`schedule`: max_epochs, max_steps, limits, val_check_interval, val_every_n_epochs), and no checkpoints
    (the `callbacks` without checkpointers), trackers or resume, so that it leaves nothing behind a real run could
    take for its own."""

    def __init__(self, batches: int, callbacks: Sequence[Any] | None) -> None:
        limits: dict[str, int | float | None] = dict.fromkeys(("fit", "validate", "test", "predict"), batches)
        self.schedule = (1, None, limits, None, 1)
        self.callbacks = [callback for callback in callbacks or () if not isinstance(callback, Checkpointer)]
        get_dist_logger().info(
            f"fast_dev_run: {batches} batch(es) of each stage; no checkpoints, no tracker runs, no resume."
        )


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
