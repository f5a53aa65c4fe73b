"""`ScorePatience`: the decision behind early stopping, shared by Ignite's handler and the Trainer's callback.

Is this score an improvement on the best (given `mode`, `threshold`, `threshold_mode`, `cumulative`), how many
checks in a row have not improved, has `patience` run out, and the state that lets a resumed run keep counting.
`tracktrain.handlers.EarlyStopping` (Ignite's face) is a thin subclass that reads the score off an engine and
terminates the trainer; `tracktrain.callbacks.EarlyStopping` (Lightning's face) holds one and feeds it the
monitored metric.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Literal

from tracktrain.checks.numeric import is_integral

__all__ = ["ScorePatience"]


class ScorePatience:
    """Counts the checks in a row whose score did not improve on the best one; `exhausted` after `patience`.

    With `mode="max"` higher is better, with `"min"` lower is. A score improves when it beats the best by more than
    `threshold`: an absolute margin (`threshold_mode="abs"`) or a fraction of the best (`"rel"`). Without
    `cumulative` a score that beats the best by less than the threshold still becomes the best (the next one must
    beat *it*); with `cumulative=True` the best only moves on a real improvement, so small gains add up.

    Args:
        patience: checks without improvement that exhaust the patience.
        mode: "max" or "min".
        threshold: smallest gain that counts (>= 0).
        threshold_mode: "abs" or "rel".
        cumulative: see above.
        best_score: the best before the first check. None (Ignite): the first score becomes the best without
            counting. A worst value (Lightning's ±inf): the first score is compared with it like any other.
        nan_improves: how a NaN compares. Ignite asks "is the score <= the bar?" for *no* improvement, so a NaN
            score (or best) counts as an improvement; Lightning asks "is it > the bar?" for an improvement, so a
            NaN never does. The faces keep their library's answer; for numbers the two questions agree.

    The faces validate their arguments, each in its own API's words; this class trusts them.
    """

    def __init__(
        self,
        patience: int,
        mode: Literal["min", "max"] = "max",
        threshold: float = 0.0,
        threshold_mode: Literal["abs", "rel"] = "abs",
        cumulative: bool = False,
        best_score: float | None = None,
        nan_improves: bool = True,
    ) -> None:
        self.patience = int(patience)
        self.mode = mode
        self.threshold = float(threshold)
        self.threshold_mode = threshold_mode
        self.cumulative = bool(cumulative)
        self.nan_improves = bool(nan_improves)
        self._initial_best = best_score
        self.counter = 0
        self.best_score: float | None = best_score

    def improves(self, score: float) -> bool:
        """Whether `score` beats the best by more than the threshold (anything beats no best at all)."""
        best = self.best_score
        if best is None:
            return True
        margin = -self.threshold if self.mode == "min" else self.threshold
        bar = best + margin if self.threshold_mode == "abs" else best * (1 + margin)
        if self.nan_improves:  # Ignite's question: "no improvement" is `score <= bar`, False when a NaN is in it
            return not (score <= bar if self.mode == "max" else score >= bar)
        return score > bar if self.mode == "max" else score < bar  # Lightning's: False when a NaN is in it

    def check(self, score: float) -> bool:
        """Record one check of `score`; True when it improved (or was the first), False when it counted against
        the patience (see `exhausted`)."""
        if self.best_score is None:
            self.best_score = score
            return True
        if self.improves(score):
            self.best_score = score
            self.counter = 0
            return True
        if not self.cumulative:  # a small gain still becomes the best
            best = self.best_score
            self.best_score = max(score, best) if self.mode == "max" else min(score, best)
        self.counter += 1
        return False

    @property
    def exhausted(self) -> bool:
        """Whether `patience` checks in a row have not improved: time to stop."""
        return self.counter >= self.patience

    def reset(self) -> None:
        """Forget the best score and the count, e.g. before a new training run."""
        self.counter = 0
        self.best_score = self._initial_best

    _state_dict_all_req_keys = ("counter", "best_score")

    def state_dict(self) -> OrderedDict[str, Any]:
        """`counter` (checks without improvement so far) and `best_score` (None before the first check)."""
        return OrderedDict([("counter", self.counter), ("best_score", self.best_score)])

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue from a `state_dict()`: the next check counts on from its counter."""
        name = type(self).__name__
        if not isinstance(state_dict, Mapping):
            raise TypeError(
                f"Argument state_dict should be a dictionary, but given {type(state_dict)}: pass the dict "
                f"returned by {name}.state_dict()."
            )
        for key in self._state_dict_all_req_keys:
            if key not in state_dict:
                raise ValueError(
                    f"Required state attribute '{key}' is absent in provided state_dict '{state_dict.keys()}': "
                    f"pass the dict returned by {name}.state_dict()."
                )
        counter = state_dict["counter"]
        if not is_integral(counter) or counter < 0:
            raise ValueError(f"state_dict['counter'] must be an integer >= 0, got {counter!r}.")
        self.counter = int(counter)
        self.best_score = state_dict["best_score"]
