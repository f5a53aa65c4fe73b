"""`PreemptionControl`: a fit's answer to SIGTERM/SIGUSR1/Ctrl-C (see `tracktrain.distributed.preemption`): after the step
under way, a checkpoint within `preemption_timeout`, one line saying where it stopped, and `Terminated`.

Without lockstep ranks the steps carry nothing until a signal comes: the signal itself attaches the check. With
ranks that step in lockstep (DDP) a signal on any rank must stop every rank at the same step, so every few steps
the ranks exchange the flag (see `run_order`), acting on the previous exchange.
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

from tracktrain.distributed.logger import get_dist_logger
from tracktrain.distributed.preemption import SignalWatch, Terminated
from tracktrain.engine.events import Events, RemovableEventHandle

if TYPE_CHECKING:
    from collections.abc import Callable

    from tracktrain.distributed.collectives import AsyncAnyRank
    from tracktrain.engine.engine import Engine
    from tracktrain.trainer.run_checkpoints import RunCheckpoints
    from tracktrain.trainer.strategies.base import Strategy
    from tracktrain.trainer.trainer_state import TrainerState

__all__ = ["PreemptionControl"]


class PreemptionControl:
    """Args:
    strategy: whether ranks step in lockstep, and the exchange of the flag between them.
    engines: the stages' engines, by name (a signal attaches its check to the fit's and the validation's).
    checkpoints: the run's: whether any checkpointer saves, and the newest checkpoint.
    state: the Trainer's (the step it stopped after).
    save_all_now: every checkpointer saves now, within this many seconds; whether all of it was committed.
    """

    def __init__(
        self,
        strategy: Strategy,
        engines: dict[str, Engine],
        checkpoints: RunCheckpoints,
        state: TrainerState,
        save_all_now: Callable[[float], bool],
    ) -> None:
        self._strategy, self._engines, self._checkpoints, self._state = strategy, engines, checkpoints, state
        self._save_all_now = save_all_now
        self._timeout = 0.0
        self._signals = SignalWatch(on_signal=self._arm)
        self._checks: list[RemovableEventHandle] = []
        self._agreement: AsyncAnyRank | None = None

    def start(self, timeout: float) -> None:
        """A fit starts: watch for signals (and exchange the flag, when ranks step in lockstep); a signal's checkpoint
        gets `timeout` seconds (`Trainer(preemption_timeout=...)`)."""
        self._timeout = timeout
        self._signals.install()
        strategy = self._strategy
        self._agreement = strategy.async_any_rank() if strategy.steps_in_lockstep else None

    def stop(self) -> None:
        self._signals.restore()
        if self._agreement is not None:
            self._agreement.finish()
            self._agreement = None

    def detach(self) -> None:
        """Remove the checks a signal attached (an entry point's end)."""
        for handle in self._checks:
            handle.remove()
        self._checks = []

    def _arm(self, signum: int) -> None:
        """In the signal handler: check at the next step's end."""
        if self._agreement is None:
            self._checks += [
                self._engines[stage].add_event_handler(Events.ITERATION_COMPLETED, self.check)
                for stage in ("fit", "validate")
            ]

    def check(self) -> None:
        """After a step: a pre-emption signal (on any rank, under DDP) saves a checkpoint and stops the run."""
        signum = self._signals.received or 0
        if self._agreement is not None:
            signum = self._agreement.exchange(signum)
        if signum:
            self._preempt(signum)

    def _preempt(self, signum: int) -> None:
        checkpoints = self._checkpoints
        saved = self._save_all_now(self._timeout)
        if not checkpoints.checkpointers:
            outcome = "nothing was saved (no ModelCheckpoint): a new run starts over"
        elif not saved:
            outcome = (
                f"its checkpoint did not finish within preemption_timeout={self._timeout}s: "
                "running the same command again resumes from the newest complete one"
            )
        else:
            outcome = f"{checkpoints.newest_path()} holds it: run the same command again to resume"
        message = f"Stopped by {signal.Signals(signum).name} after step {self._state.global_step}; {outcome}."
        get_dist_logger().info(message)  # the one line a person reads; the exit status says "pre-empted"
        raise Terminated(signum, message)
