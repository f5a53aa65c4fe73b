"""`EarlyStopping`: stop the trainer when an evaluation score has not improved for `patience` evaluations."""

from __future__ import annotations

import logging
import numbers
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from tracktrain.engine.engine import Engine

__all__ = ["EarlyStopping"]


class EarlyStopping:
    """Calls `trainer.terminate()` after `patience` calls in a row without an improvement of the score.

    Attach it to the evaluator's COMPLETED event; each call reads `score_function(evaluator)`, where higher is
    better (return `-loss` for a loss). A score improves when it is greater than the best score plus
    `min_delta`. Without `cumulative_delta`, a score that beats the best by less than `min_delta` still
    becomes the best (the next one must beat *it* by `min_delta`); with `cumulative_delta=True` the best only
    moves on a real improvement, so many small gains add up until they reach `min_delta`.

    Args:
        patience: evaluations without improvement to wait before stopping (>= 1).
        score_function: `score_function(engine) -> float`, higher is better.
        trainer: the Engine to terminate.
        min_delta: smallest increase that counts as an improvement (>= 0).
        cumulative_delta: measure `min_delta` from the last improvement, not from the last evaluation.

    `state_dict()` / `load_state_dict()` carry `counter` and `best_score`, so a resumed run keeps counting.

    .. code-block:: python

        def score_function(engine):
            return -engine.state.metrics["nll"]

        handler = EarlyStopping(patience=10, score_function=score_function, trainer=trainer)
        evaluator.add_event_handler(Events.COMPLETED, handler)  # note: on the evaluator
    """

    _state_dict_all_req_keys = ("counter", "best_score")

    def __init__(
        self,
        patience: int,
        score_function: Callable[[Engine], float],
        trainer: Engine,
        min_delta: float = 0.0,
        cumulative_delta: bool = False,
    ) -> None:
        if not callable(score_function):
            raise TypeError(
                f"Argument score_function should be a function score_function(engine) -> float, "
                f"got {score_function!r}."
            )
        if not isinstance(patience, numbers.Integral) or isinstance(patience, bool):
            raise TypeError(f"Argument patience should be a positive integer, got {patience!r}.")
        if patience < 1:
            raise ValueError(
                f"Argument patience should be a positive integer (evaluations to wait), got {patience!r}."
            )
        if not isinstance(trainer, Engine):
            raise TypeError(
                f"Argument trainer should be the Engine to terminate, got {trainer!r} of type "
                f"{type(trainer).__name__}."
            )
        if not isinstance(min_delta, numbers.Real) or min_delta < 0.0:
            raise ValueError(
                f"Argument min_delta should be a number >= 0 (the smallest gain that counts), got {min_delta!r}; "
                "for a score where lower is better, negate the score in score_function instead."
            )
        self.score_function = score_function
        self.patience = int(patience)
        self.min_delta = float(min_delta)
        self.cumulative_delta = bool(cumulative_delta)
        self.trainer = trainer
        self.counter = 0
        self.best_score: float | None = None
        self.logger = logging.getLogger(f"{__name__}.{type(self).__name__}")

    def __call__(self, engine: Engine) -> None:
        score = self.score_function(engine)

        if self.best_score is None:
            self.best_score = score
            return

        if score <= self.best_score + self.min_delta:
            if not self.cumulative_delta and score > self.best_score:
                self.best_score = score
            self.counter += 1
            self.logger.debug("EarlyStopping: %i / %i", self.counter, self.patience)
            if self.counter >= self.patience:
                self.logger.info("EarlyStopping: Stop training")
                self.trainer.terminate()
        else:
            self.best_score = score
            self.counter = 0

    def reset(self) -> None:
        """Forget the best score and the count, e.g. before a new training run with the same handler."""
        self.counter = 0
        self.best_score = None

    def state_dict(self) -> OrderedDict[str, Any]:
        """`counter` (evaluations without improvement so far) and `best_score` (None before the first)."""
        return OrderedDict([("counter", self.counter), ("best_score", self.best_score)])

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue from a `state_dict()`: the next evaluation counts on from the saved counter."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(
                f"EarlyStopping.load_state_dict expects the dict returned by state_dict(), "
                f"got {type(state_dict).__name__}."
            )
        missing = [key for key in self._state_dict_all_req_keys if key not in state_dict]
        if missing:
            raise ValueError(
                f"Required state attribute(s) {missing} are absent in provided state_dict {list(state_dict)}; "
                "pass the dict returned by EarlyStopping.state_dict()."
            )
        counter = state_dict["counter"]
        if not isinstance(counter, numbers.Integral) or counter < 0:
            raise ValueError(f"state_dict['counter'] must be an integer >= 0, got {counter!r}.")
        self.counter = int(counter)
        self.best_score = state_dict["best_score"]
