"""`AccumulationSchedule.epochs_for`: the epochs a fit limited by max_steps runs, counted epoch by epoch up to the
schedule's last change and at once after it — so that a huge max_steps ("until stopped") costs nothing at start."""

from __future__ import annotations

import math
import time

import pytest

from tracktrain.trainer.accumulation import AccumulationSchedule


def epochs_one_by_one(schedule: AccumulationSchedule, steps: int, epoch_length: int) -> int:
    epoch, done = 0, 0
    while done < steps:
        done += math.ceil(epoch_length / schedule.factor(epoch))
        epoch += 1
    return epoch


@pytest.mark.parametrize("scheduling", [{0: 1}, {0: 3}, {0: 8, 4: 4, 8: 1}, {2: 5}, {0: 1, 3: 7}])
def test_epochs_for_counts_as_epoch_by_epoch(scheduling):
    schedule = AccumulationSchedule(scheduling)
    for epoch_length in (1, 2, 7, 25):
        for steps in range(120):
            assert schedule.epochs_for(steps, epoch_length) == epochs_one_by_one(schedule, steps, epoch_length)


def test_a_huge_max_steps_is_counted_at_once():
    started = time.perf_counter()
    assert AccumulationSchedule({0: 1, 4: 2}).epochs_for(10**8, 25) == 4 + math.ceil((10**8 - 100) / 13)
    assert time.perf_counter() - started < 0.1  # epoch by epoch: ~2 s (and ~20 s for 10**9)
