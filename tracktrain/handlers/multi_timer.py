"""`MultiTimer`: named stopwatches for phases of training (Colossal-AI's `colossalai.utils.MultiTimer`).

The Trainer starts and stops a watch per phase ("Train-step", "Train-epoch", ...) and its timing and throughput
callbacks read the last interval and the history of each. A run can time millions of steps, so a watch keeps a
count and an exact running sum of its history instead of a list of intervals.

`Timer` is Ignite's handler in `tracktrain.handlers.timing`; the single watch here is therefore `StopWatch`.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from time import perf_counter

__all__ = ["MultiTimer", "StopWatch"]


def _synchronize_cuda() -> None:
    """Wait for the CUDA work queued so far, so that the clock read next includes it.

    torch is looked up, not imported: if it was never imported, CUDA cannot have been initialized, and timing must
    not cost a torch import. Without CUDA there is nothing to wait for.
    """
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()  # a host-device sync point, asked for with synchronize=True


def _add_exactly(partials: list[float], value: float) -> None:
    """Add `value` to the exact sum held in `partials`, a few non-overlapping floats (Shewchuk's algorithm, the one
    `math.fsum` uses). `math.fsum(partials)` is then the correctly rounded sum of every value added, without
    keeping the values; the list stays a few entries long."""
    kept = 0
    for partial in partials:
        if abs(value) < abs(partial):
            value, partial = partial, value
        high = value + partial
        low = partial - (high - value)  # the bits of the smaller term that `high` could not hold
        if low:
            partials[kept] = low
            kept += 1
        value = high
    partials[kept:] = [value]


class StopWatch:
    """One stopwatch: `start()`, then `stop()` returns the seconds in between; kept intervals form its history.

    `get_elapsed_time()` is the last stopped interval; `get_history_sum()` and `get_history_mean()` cover the
    intervals stopped with `keep_in_history=True` since the last `reset()`, exactly (a correctly rounded sum, as
    `math.fsum` of the intervals would give).

    Args:
        name: shown in errors and the repr (a MultiTimer names each watch after its key).
        synchronize: wait for queued CUDA work before each clock read, so GPU time is measured rather than the
            time to launch it; does nothing until CUDA is initialized.
    """

    def __init__(self, name: str = "", synchronize: bool = False) -> None:
        if not isinstance(synchronize, bool):
            raise TypeError(f"StopWatch synchronize must be True or False, got {synchronize!r}.")
        self.name = name
        self.synchronize = synchronize
        self.reset()

    def reset(self) -> None:
        """Forget the history and the last interval, and abandon a running interval."""
        self._running = False
        self._started_at = 0.0
        self._last = 0.0
        self._count = 0
        self._partials: list[float] = []

    def _clock(self) -> float:
        if self.synchronize:
            _synchronize_cuda()
        return perf_counter()

    def start(self) -> None:
        """Start an interval. Starting a running watch is an error: the interval it measures would be lost."""
        if self._running:
            raise RuntimeError(
                f"{self._label()} is already running. Call stop() before starting it again, "
                "or reset() to abandon the running interval."
            )
        self._running = True
        self._started_at = self._clock()

    def stop(self, keep_in_history: bool = False) -> float:
        """End the running interval and return its length in seconds; add it to the history if
        `keep_in_history`."""
        now = self._clock()
        if not self._running:
            raise RuntimeError(f"{self._label()} is not running, so there is nothing to stop. Call start() first.")
        self._running = False
        elapsed = now - self._started_at
        self._last = elapsed
        if keep_in_history:
            self._count += 1
            _add_exactly(self._partials, elapsed)
        return elapsed

    def running_seconds(self) -> float:
        """The seconds of the running interval so far (0 when stopped), on the clock `stop()` will read."""
        return self._clock() - self._started_at if self._running else 0.0

    def _abandon(self) -> None:
        """Drop a running interval without recording it (used when timing is switched off mid-interval)."""
        self._running = False

    @property
    def is_running(self) -> bool:
        """Whether an interval has been started and not yet stopped."""
        return self._running

    @property
    def has_history(self) -> bool:
        """Whether any interval was stopped with `keep_in_history=True` since the last reset."""
        return self._count > 0

    @property
    def history_count(self) -> int:
        """How many intervals the history holds."""
        return self._count

    def get_elapsed_time(self) -> float:
        """Seconds of the last stopped interval (kept in history or not); 0.0 before the first stop."""
        if self._running:
            raise RuntimeError(
                f"{self._label()} is still running; get_elapsed_time() reports the last stopped interval. "
                "Call stop() first."
            )
        return self._last

    def get_history_sum(self) -> float:
        """Total seconds of the intervals in the history (0.0 when it is empty)."""
        return math.fsum(self._partials)

    def get_history_mean(self) -> float:
        """Mean seconds of the intervals in the history."""
        if self._count == 0:
            raise RuntimeError(
                f"{self._label()} has no history to average. Stop it with keep_in_history=True first "
                "(check has_history before asking)."
            )
        return math.fsum(self._partials) / self._count

    def _label(self) -> str:
        return f"StopWatch {self.name!r}" if self.name else "StopWatch"

    def __repr__(self) -> str:
        return f"StopWatch({self.name!r}, running={self._running}, last={self._last:.6f}s, history_count={self._count})"


class MultiTimer:
    """Named `StopWatch`es, created on first `start(name)`; iterating yields `(name, watch)` in creation order.

    With `on=False` (or after `set_status(False)`) `start` and `stop` do nothing and `stop` returns 0.0, so timing
    can be switched off without touching the code that times.

    Args:
        on: whether timing is active.
        synchronize: wait for queued CUDA work before every clock read (see `StopWatch`). Off by default: it stalls
            the host at every start and stop.

    .. code-block:: python

        timer = MultiTimer()
        timer.start("Train-step")
        ...
        seconds = timer.stop("Train-step", keep_in_history=True)
        mean = timer.get_timer("Train-step").get_history_mean()
    """

    def __init__(self, on: bool = True, synchronize: bool = False) -> None:
        if not isinstance(on, bool):
            raise TypeError(f"MultiTimer on must be True or False, got {on!r}.")
        if not isinstance(synchronize, bool):
            raise TypeError(f"MultiTimer synchronize must be True or False, got {synchronize!r}.")
        self._on = on
        self._synchronize = synchronize
        self._watches: dict[str, StopWatch] = {}

    def start(self, name: str) -> None:
        """Start the watch `name`, creating it the first time; a no-op while timing is off."""
        if not self._on:
            return
        watch = self._watches.get(name)
        if watch is None:
            if not isinstance(name, str):
                raise TypeError(f"MultiTimer names timers with strings, got {name!r} of type {type(name).__name__}.")
            watch = self._watches[name] = StopWatch(name, synchronize=self._synchronize)
        watch.start()

    def stop(self, name: str, keep_in_history: bool = False) -> float:
        """Stop the watch `name` and return the seconds since its start (kept in its history if
        `keep_in_history`); returns 0.0 and does nothing while timing is off."""
        if not self._on:
            return 0.0
        return self.get_timer(name).stop(keep_in_history)

    def get_timer(self, name: str) -> StopWatch:
        """The watch started under `name`."""
        watch = self._watches.get(name)
        if watch is None:
            raise KeyError(
                f"MultiTimer has no timer named {name!r}; known timers: {list(self._watches)}. "
                "A timer exists once start(name) was called while timing was on."
            )
        return watch

    def reset(self, name: str | None = None) -> None:
        """Reset the watch `name`, or every watch when `name` is None (they stay registered).

        Unlike Colossal-AI, this also works while timing is off: resetting is not timing.
        """
        if name is not None:
            self.get_timer(name).reset()
            return
        for watch in self._watches.values():
            watch.reset()

    def is_on(self) -> bool:
        """Whether `start` and `stop` measure."""
        return self._on

    def set_status(self, on: bool) -> None:
        """Switch timing on or off. Switching off abandons running intervals, so that switching back on starts
        clean instead of failing on a watch that was never stopped."""
        if not isinstance(on, bool):
            raise TypeError(f"MultiTimer.set_status needs True or False, got {on!r}.")
        if self._on and not on:
            for watch in self._watches.values():
                watch._abandon()
        self._on = on

    def __contains__(self, name: object) -> bool:
        return name in self._watches

    def __iter__(self) -> Iterator[tuple[str, StopWatch]]:
        return iter(list(self._watches.items()))

    def __repr__(self) -> str:
        return f"MultiTimer(on={self._on}, synchronize={self._synchronize}, timers={list(self._watches)})"
