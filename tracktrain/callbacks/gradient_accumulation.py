"""`GradientAccumulationScheduler`, Lightning's: how many batches each optimizer step adds up, changing at the
epochs given. The Trainer reads its schedule (`tracktrain.trainer.accumulation`, the one place accumulation is
decided) when a fit starts: the windows, the steps an epoch takes (`estimated_stepping_batches`, `max_steps`) and a
resumed run's position all follow it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tracktrain.callbacks.base import Callback
from tracktrain.trainer.accumulation import AccumulationSchedule

__all__ = ["GradientAccumulationScheduler"]


class GradientAccumulationScheduler(Callback):
    """`GradientAccumulationScheduler(scheduling={0: 8, 4: 4, 8: 1})`: 8 batches per optimizer step in epochs 0-3,
    4 in epochs 4-7, then 1 (epochs counted from 0; before the first epoch given, 1). With
    `Trainer(accumulate_grad_batches=1)` (the default) only, and automatic optimization, as in Lightning."""

    def __init__(self, scheduling: Mapping[int, int]) -> None:
        self.accumulation_schedule = AccumulationSchedule(scheduling)

    @property
    def scheduling(self) -> dict[int, int]:
        return dict(self.accumulation_schedule.scheduling)

    def get_accumulate_grad_batches(self, epoch: int) -> int:
        """Lightning's: the batches per step in `epoch`."""
        return self.accumulation_schedule.factor(epoch)

    def on_fit_start(self, trainer: Any, module: Any) -> None:
        if not module.automatic_optimization:
            raise RuntimeError(
                "GradientAccumulationScheduler under manual optimization (automatic_optimization = False): the "
                "module steps its optimizers itself, so it accumulates as it chooses; remove the scheduler."
            )
