"""Pre-emption: SIGTERM or SIGUSR1 (what schedulers and spot instances send before a kill), or Ctrl-C (SIGINT),
ends a fit cleanly.

The signal handler only records the signal. The Trainer looks at it after each step (training or validation),
saves a checkpoint within a deadline, logs one line (where it stopped, the checkpoint that holds it, that the same
command resumes) and raises `Terminated`: the loggers mark their runs KILLED, and the process, if nothing catches
it, exits without a traceback with status 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM, 138 for
SIGUSR1), which tells a job script "stopped, run me again" apart from success (0) and failure (1). A second
signal while that happens stops at once.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["PREEMPTION_SIGNALS", "SignalWatch", "Terminated"]

PREEMPTION_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGUSR1")
    if hasattr(signal, name)  # no SIGUSR1 on Windows
)
"""The signals a `SignalWatch` records by default: SIGINT (Ctrl-C), SIGTERM and SIGUSR1 (what schedulers and spot
instances send before a kill; Windows has no SIGUSR1)."""


class Terminated(SystemExit):
    """The run was stopped by a signal. A SystemExit, so no `except Exception` swallows it and an uncaught one
    exits without a traceback, with `code` 128 + `signum`."""

    def __init__(self, signum: int, message: str = "") -> None:
        super().__init__(128 + signum)
        self.signum = signum
        self.message = message or f"stopped by {signal.Signals(signum).name}"

    def __str__(self) -> str:
        return self.message


class SignalWatch:
    """Records the first pre-emption signal while installed (in the main thread only; elsewhere it does nothing)."""

    def __init__(
        self, signals: tuple[int, ...] = PREEMPTION_SIGNALS, on_signal: Callable[[int], None] | None = None
    ) -> None:
        self.signals = signals
        self.on_signal = on_signal  # called (in the main thread) with the first signal: to arm a check
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        """Forget any earlier signal and record the next one of `signals`, keeping their previous handlers for
        `restore` (nothing is installed outside the main thread, or twice)."""
        self.received = None
        if self._previous or threading.current_thread() is not threading.main_thread():
            return
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._on_signal)

    def restore(self) -> None:
        """Put back the handlers `install` replaced."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.received is not None:  # asked twice: the clean stop is taking too long for whoever sends these
            raise Terminated(signum, f"stopped by a second {signal.Signals(signum).name} while saving")
        self.received = signum
        if self.on_signal is not None:
            self.on_signal(signum)
