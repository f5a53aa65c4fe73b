"""Gradient accumulation, decided in one place: how many batches each optimizer step of a fit adds up, epoch by epoch
— `Trainer(accumulate_grad_batches=N)` for every epoch, or Lightning's `GradientAccumulationScheduler(scheduling=
{epoch: N, ...})` — and what follows from it: the windows of each epoch (`windows`), the steps an epoch or a run takes
(`steps`). The schedule is part of the run's settings, so a resumed run counts its steps as the run that saved it."""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from typing import Any

from tracktrain.checks.numeric import is_integral
from tracktrain.engine.training_step import EpochWindows

__all__ = ["AccumulationSchedule", "schedule_of"]


class AccumulationSchedule:
    """`scheduling`: from the epoch given (counted from 0) on, that many batches per optimizer step, until the next
    epoch given (`{0: 8, 4: 4, 8: 1}`: 8 for epochs 0-3, 4 for epochs 4-7, 1 after)."""

    def __init__(self, scheduling: Mapping[int, int], what: str = "GradientAccumulationScheduler(scheduling=...)"):
        if not isinstance(scheduling, Mapping) or not scheduling:
            raise TypeError(f"{what} takes a non-empty dict {{epoch: batches per step}}, got {scheduling!r}.")
        for epoch, factor in scheduling.items():
            for name, value, low in (("epoch", epoch, 0), ("batches per step", factor, 1)):
                if isinstance(value, bool) or not is_integral(value) or value < low:
                    raise ValueError(
                        f"{what}: each {name} must be an integer >= {low}, got {value!r} in {scheduling!r}."
                    )
        self.scheduling = {int(epoch): int(factor) for epoch, factor in sorted(scheduling.items())}
        if 0 not in self.scheduling:  # Lightning's: no accumulation before the first epoch given
            self.scheduling = {0: 1, **self.scheduling}
        self._epochs = list(self.scheduling)

    def factor(self, epoch: int) -> int:
        """The batches per optimizer step in `epoch` (counted from 0)."""
        return self.scheduling[self._epochs[bisect.bisect_right(self._epochs, epoch) - 1]]

    @property
    def accumulates(self) -> bool:
        """Whether any epoch adds up more than one batch per step."""
        return any(factor > 1 for factor in self.scheduling.values())

    def steps(self, epoch_length: int, epochs: int, first: int = 0) -> int:
        """The optimizer steps of `epochs` epochs from epoch `first`, each of `epoch_length` batches (an epoch's last
        window is a step of its own, however short)."""
        return sum(math.ceil(epoch_length / self.factor(epoch)) for epoch in range(first, first + epochs))

    def epochs_for(self, steps: int, epoch_length: int) -> int:
        """How many epochs `steps` optimizer steps take (the last one possibly part of an epoch). Epoch by epoch up
        to the schedule's last change, then at once: `Trainer(max_steps=10**9)` as "until stopped" costs nothing."""
        epoch, done, last_change = 0, 0, self._epochs[-1]
        while done < steps and epoch < last_change:
            done += math.ceil(epoch_length / self.factor(epoch))
            epoch += 1
        if done < steps:  # from here every epoch takes the same number of steps
            epoch += math.ceil((steps - done) / math.ceil(epoch_length / self.factor(epoch)))
        return epoch

    def setting(self) -> int | dict[str, int]:
        """What a run's settings record: the number, or the schedule (keys as text, as JSON keeps them)."""
        if list(self.scheduling) == [0]:
            return self.scheduling[0]
        return {str(epoch): factor for epoch, factor in self.scheduling.items()}

    def windows(self) -> EpochWindows:
        """The windows of a fit: each epoch's factor's many batches, counted from the epoch's start."""
        return EpochWindows(self.factor)


def schedule_of(accumulate_grad_batches: int, callbacks: list[Any]) -> AccumulationSchedule:
    """The fit's schedule: a `GradientAccumulationScheduler` among the callbacks (a callback with `scheduling`), or
    `accumulate_grad_batches` for every epoch. Both is an error, as in Lightning: one of them decides."""
    schedulers = [
        callback
        for callback in callbacks
        if isinstance(getattr(callback, "accumulation_schedule", None), AccumulationSchedule)
    ]
    if not schedulers:
        return AccumulationSchedule({0: accumulate_grad_batches}, "Trainer(accumulate_grad_batches=...)")
    if len(schedulers) > 1:
        raise ValueError("Trainer(callbacks=...) has two GradientAccumulationSchedulers: give one.")
    if accumulate_grad_batches != 1:
        raise ValueError(
            f"Trainer(accumulate_grad_batches={accumulate_grad_batches}) and a GradientAccumulationScheduler: the "
            "scheduler decides the batches per step; leave accumulate_grad_batches at 1 (as Lightning asks)."
        )
    return schedulers[0].accumulation_schedule
