"""What a fit does when its loss is NaN or infinite: `Trainer(nonfinite="error" | "warn" | "skip_step")`.

A non-finite loss turns every parameter non-finite at the next optimizer step, and training would go on
computing nothing. Watching for it must not add a host-device sync to every step, so the loss of each step is
kept as it is (`observe`: a list append) and the losses are checked together (`check`: one stack, one sync) only
where the Trainer reads values anyway — at each publication of logged values (every
`log_every_n_steps`), at each epoch's end — and before a checkpoint is saved, so that no checkpoint ever holds the
parameters of a step after a non-finite loss.

- "error" (default): `check` raises `NonFiniteLoss`, naming the first step whose loss was not finite, its value,
  and the newest checkpoint taken before it.
- "warn": `check` warns once per finding and training goes on.
- "skip_step": every step reads its loss back (one sync per step) and a non-finite one skips the step: no backward,
  no optimizer step; the skipped steps are counted and reported at each check.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from tracktrain.trainer.strategies.base import Strategy

__all__ = ["NONFINITE_POLICIES", "NonFiniteLoss", "NonFiniteWatch"]

NONFINITE_POLICIES = ("error", "warn", "skip_step")


_CHUNK = 256  # losses kept as tensors before they are folded into one


class NonFiniteLoss(FloatingPointError):
    """The training loss was NaN or infinite (`Trainer(nonfinite="error")`)."""


class NonFiniteWatch:
    """The losses of the steps since the last check, kept as they are (detached, on their device) until `check`
    reads them all at once: observing a step costs a list append, not a device operation. `strategy`: the fit's, which
    agrees on the findings across ranks."""

    def __init__(self, policy: str, strategy: Strategy) -> None:
        if policy not in NONFINITE_POLICIES:
            raise ValueError(
                f"Trainer(nonfinite=...) must be one of {', '.join(map(repr, NONFINITE_POLICIES))}, got {policy!r}."
            )
        self.policy = policy
        self._strategy = strategy
        self._steps: list[int] = []
        self._losses: list[torch.Tensor] = []
        # full lists folded into one tensor each (no sync), so a long interval between checks holds 12 bytes a step
        self._chunks: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.skipped_steps = 0
        self._skipped_reported = 0

    def reset(self) -> None:
        self._steps, self._losses, self._chunks = [], [], []
        self.skipped_steps = self._skipped_reported = 0

    def observe(self, loss: torch.Tensor, step: int) -> bool:
        """Record `loss` of optimizer step `step` (1-based); whether the step should go on. No sync, except under
        "skip_step"."""
        loss = loss.detach()
        if self.policy == "skip_step":
            finite = bool(torch.isfinite(loss).all())  # a sync point, per step: what this policy costs
            # ranks skip together (under DDP one that skipped backward would leave the others in its all-reduce)
            if not self._strategy.any_rank(not finite):
                return True
            self.skipped_steps += 1
            return False
        self._steps.append(step)
        self._losses.append(loss)
        if len(self._losses) == _CHUNK:
            self._fold()
        return True

    def _fold(self) -> None:
        if self._losses:
            values = torch.stack([loss.reshape(()) for loss in self._losses]).float()
            self._chunks.append((torch.tensor(self._steps), values))
        self._steps, self._losses = [], []

    def _first_non_finite(self) -> tuple[int, float]:
        """(step, value) of the first non-finite loss observed since the last call, or (-1, 0.0). A sync point."""
        self._fold()
        chunks, self._chunks = self._chunks, []
        if not chunks:
            return -1, 0.0
        steps = torch.cat([chunk_steps for chunk_steps, _ in chunks])
        values = torch.cat([chunk_values for _, chunk_values in chunks])
        bad = (~torch.isfinite(values)).nonzero()  # reading its size back is the sync
        if not len(bad):
            return -1, 0.0
        first = int(bad[0, 0])
        return int(steps[first]), float(values[first])

    def check(self, last_good_checkpoint: Callable[[int], str | None]) -> None:
        """Read what was observed (a sync point) and act on it: raise, warn, or report skipped steps.
        `last_good_checkpoint(step)`: the newest checkpoint taken before `step`, for the message."""
        if self.policy == "skip_step":
            if self.skipped_steps > self._skipped_reported:
                warnings.warn(
                    f"Skipped {self.skipped_steps - self._skipped_reported} training step(s) whose loss was "
                    f"not finite (Trainer(nonfinite='skip_step'); {self.skipped_steps} so far).",
                    stacklevel=2,
                )
                self._skipped_reported = self.skipped_steps
            return
        found = self._first_non_finite()
        # every rank checks at the same points: all of them act on the earliest finding of any (or none does)
        findings = [finding for finding in self._strategy.gather(found) if finding[0] >= 0]
        if not findings:
            return
        step, value = min(findings)
        checkpoint = last_good_checkpoint(step)
        where = (
            f"the newest checkpoint before it is {checkpoint}" if checkpoint else "no checkpoint was taken before it"
        )
        message = (
            f"The training loss was {_text(value)} at step {step}: the parameters are no longer finite from "
            f"there on; {where}."
        )
        if self.policy == "warn":
            warnings.warn(message + " Training goes on (Trainer(nonfinite='warn')).", stacklevel=2)
            return
        raise NonFiniteLoss(
            message + " Lower the learning rate, clip gradients (gradient_clip_val), check the data for NaN, or pass "
            "Trainer(nonfinite='skip_step') to skip such steps."
        )


def _text(value: float) -> str:
    return "NaN" if math.isnan(value) else ("+inf" if value > 0 else "-inf")
