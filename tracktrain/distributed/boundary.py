"""Decisions every rank takes alike, agreed at the boundaries of the loop in one exchange.

Under DDP a decision taken from a rank's own values (stop early on a metric logged without `sync_dist`, keep a
checkpoint for its score, stop because a hook asked) must be everyone's, or one rank goes on to a collective the
others skip and waits forever. So no callback issues its own collective to agree on something. Each declares
`Decision`s at a `Boundary` — the end of a training epoch, of a validation inside fit, of a training step — and the
Trainer runs, once at each boundary and before anything acts on them:

1. every decision due there proposes this rank's value (`propose`);
2. one all-gather of all proposals, in the same order on every rank (the order the decisions were declared);
3. each decision's agreed value (`agree`: "any", "max" or "rank_zero" over the ranks) goes to its `act`, on every
   rank, in that same order.

A proposal that raises on one rank raises on every rank after the exchange (the failing rank's own error, a
RuntimeError naming it on the others), so no rank waits for one that died deciding. Without a process group the
exchange is skipped: the local value is the agreed one.

`due` says whether a decision is taken at this occurrence of its boundary (a checkpoint every 5 steps); it must be
computed from counters every rank shares (steps, epochs), never from a rank's own values. Ranks that still differ
in what is due fail at once (a signature of the due decisions leads each proposal row), never mix values.

Two agreements keep a schedule of their own, fixed by counters too: the pre-emption flag, exchanged every few
steps without waiting so that it adds no host sync (`Strategy.async_any_rank`, acted on one exchange later), and
the non-finite-loss check, at logging steps, epoch ends and saves (`trainer.nonfinite`).
"""

from __future__ import annotations

import enum
import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tracktrain.distributed import collectives as distributed
from tracktrain.distributed.ranks import global_rank

__all__ = ["AGREEMENTS", "Boundary", "Decision", "decide"]


class Boundary(enum.Enum):
    """Where decisions are agreed: every rank reaches these at the same point of the loop."""

    TRAIN_EPOCH_END = "train_epoch_end"  # after the epoch's end hooks that log values, before checkpoints save
    VALIDATION_END = "validation_end"  # a validation run by fit (each epoch, or every n batches)
    TRAIN_STEP_END = "train_step_end"  # after the step's end hooks that log values, before checkpoints save


AGREEMENTS: dict[str, Callable[[Sequence[float]], float]] = {
    "any": lambda values: float(any(value != 0 for value in values)),
    "max": max,
    "rank_zero": lambda values: values[0],
}
"""How a `Decision`'s `agree` combines the ranks' proposals into the value every rank acts on: "any" (1.0 when a
rank proposed a non-zero value, else 0.0), "max" (the largest) or "rank_zero" (rank 0's)."""


@dataclass(frozen=True)
class Decision:
    """One decision at `boundary`: `propose()` gives this rank's value (a float; a bool or an int is exact),
    `act(agreed)` receives the value agreed by `agree` over all ranks. `name` appears in errors."""

    boundary: Boundary
    name: str
    propose: Callable[[], float]
    agree: str
    act: Callable[[float], None]
    due: Callable[[], bool] | None = None

    def __post_init__(self) -> None:
        if self.agree not in AGREEMENTS:
            raise ValueError(f"Decision {self.name!r}: agree={self.agree!r} is not one of {sorted(AGREEMENTS)}.")


def decide(
    decisions: Sequence[Decision], gather: Callable[[Sequence[float]], list[list[float]]] = distributed.gather_floats
) -> None:
    """Take `decisions` (those of one boundary, in declaration order): propose, exchange once, act.

    `gather(row)`: every rank's row of floats, in rank order — the fit's `Strategy.gather_floats`, which the Trainer
    passes (this module sits below the trainer layer and does not import it); `tracktrain.distributed.collectives`'s by default.
    """
    due = [decision for decision in decisions if decision.due is None or decision.due()]
    if not due:
        return
    proposals: list[float] = []
    failure: tuple[int, BaseException] | None = None
    for index, decision in enumerate(due):
        try:
            proposals.append(float(decision.propose()))
        except Exception as error:  # noqa: BLE001 - raised below, after every rank knows
            proposals.append(math.nan)
            failure = failure or (index, error)
    signature = _signature(due)
    # every rank's proposals (and the index of the one that failed, or -1), on every rank: one all-gather
    rows = gather([signature, *proposals, float(-1 if failure is None else failure[0])])
    if any(row[0] != signature for row in rows):
        raise RuntimeError(
            f"The ranks disagree on which decisions are due at the {due[0].boundary.value} boundary (this rank, "
            f"{global_rank()}: {[decision.name for decision in due]}). A decision's `due` must depend only on what every "
            "rank shares (steps, epochs), and every rank must have the same callbacks."
        )
    if failure is not None:
        raise failure[1]
    failed_ranks = [(rank, int(row[-1])) for rank, row in enumerate(rows) if row[-1] >= 0]
    if failed_ranks:
        rank, index = failed_ranks[0]
        raise RuntimeError(
            f"Rank {rank} failed while proposing {due[index].name!r} at the {due[index].boundary.value} boundary; "
            "its own error is in its output. Every rank stops here rather than wait for it."
        )
    for index, decision in enumerate(due):
        decision.act(AGREEMENTS[decision.agree]([row[1 + index] for row in rows]))


def _signature(due: Sequence[Decision]) -> float:
    """Which decisions this rank takes here, as a number exact in a float64: ranks that differ see it at once
    (instead of reading each other's values as the wrong decisions)."""
    digest = hashlib.blake2b(repr([(d.boundary.value, d.name) for d in due]).encode(), digest_size=6).digest()
    return float(int.from_bytes(digest, "big"))
