"""`EarlyStopping`: stop the trainer when an evaluation score has not improved for `patience` evaluations."""

from __future__ import annotations

import logging
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Literal

from tracktrain.engine.engine import Engine
from tracktrain.engine.events import Events
from tracktrain.number_checks import is_integral, is_real

__all__ = ["EarlyStopping"]


class _DeprecatedName:
    """An attribute that reads and writes another one, with Ignite's DeprecationWarning."""

    def __init__(self, new: str) -> None:
        self.new = new

    def __set_name__(self, owner: type, name: str) -> None:
        self.old = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        _warn_deprecated(self.old, self.new)
        return getattr(instance, self.new)

    def __set__(self, instance: Any, value: Any) -> None:
        _warn_deprecated(self.old, self.new)
        setattr(instance, self.new, value)


class EarlyStopping:
    """Calls `trainer.terminate()` after `patience` calls in a row without an improvement of the score.

    Attach it to the evaluator's COMPLETED event (or use `attach`); each call reads `score_function(evaluator)`.
    With `mode="max"` (the default) higher is better; with `mode="min"` lower is better (a loss). A score
    improves when it beats the best score by more than `threshold`: an absolute margin with
    `threshold_mode="abs"`, a fraction of the best score with `"rel"`. Without `cumulative`, a score that beats
    the best by less than the threshold still becomes the best (the next one must beat *it*); with
    `cumulative=True` the best only moves on a real improvement, so many small gains add up.

    Args:
        patience: evaluations without improvement to wait before stopping (>= 1).
        score_function: `score_function(engine) -> float`.
        trainer: the Engine to terminate.
        threshold: smallest gain that counts as an improvement (>= 0).
        cumulative: measure the threshold from the last improvement, not from the last evaluation.
        threshold_mode: "abs" or "rel".
        mode: "max" or "min".
        min_delta, min_delta_mode, cumulative_delta: Ignite's deprecated names of threshold, threshold_mode and
            cumulative (accepted, with Ignite's DeprecationWarning).

    `state_dict()` / `load_state_dict()` carry `counter`, `best_score` and `threshold_mode`, so a resumed run
    keeps counting (Ignite's layout: each library loads the other's).

    .. code-block:: python

        handler = EarlyStopping(
            patience=10, score_function=lambda e: e.state.metrics["nll"], trainer=trainer, mode="min"
        )
        handler.attach(evaluator, reset_engine=trainer)  # checks on evaluator COMPLETED, resets on trainer STARTED
    """

    _state_dict_all_req_keys = ("counter", "best_score")

    def __init__(
        self,
        patience: int,
        score_function: Callable[[Engine], float],
        trainer: Engine,
        threshold: float = 0.0,
        cumulative: bool = False,
        threshold_mode: Literal["abs", "rel"] = "abs",
        mode: Literal["min", "max"] = "max",
        min_delta: float | None = None,
        min_delta_mode: Literal["abs", "rel"] | None = None,
        cumulative_delta: bool | None = None,
    ) -> None:
        # Checked in Ignite's order, each message starting with Ignite's words.
        if not callable(score_function):
            raise TypeError(
                f"Argument score_function should be a function: score_function(engine) -> float, "
                f"got {score_function!r}."
            )
        if not is_integral(patience) or isinstance(patience, bool):
            raise TypeError(f"Argument patience should be positive integer: got {patience!r}.")
        if patience < 1:
            raise ValueError(
                f"Argument patience should be positive integer: the evaluations to wait, got {patience!r}."
            )
        if not isinstance(trainer, Engine):
            raise TypeError(
                f"Argument trainer should be an instance of Engine: the engine to terminate, got {trainer!r} of "
                f"type {type(trainer).__name__}."
            )
        if min_delta is not None:
            _warn_deprecated("min_delta", "threshold")
            threshold = min_delta
        if min_delta_mode is not None:
            _warn_deprecated("min_delta_mode", "threshold_mode")
            threshold_mode = min_delta_mode
        if cumulative_delta is not None:
            _warn_deprecated("cumulative_delta", "cumulative")
            cumulative = cumulative_delta
        if not is_real(threshold) or threshold < 0.0:
            raise ValueError(
                f"Argument threshold should not be a negative number: it is the smallest gain that counts, got "
                f"{threshold!r}; for a score where lower is better, pass mode='min'."
            )
        if threshold_mode not in ("abs", "rel"):
            raise ValueError(f"Argument threshold_mode should be either 'abs' or 'rel'. Got {threshold_mode!r}.")
        if mode not in ("min", "max"):
            raise ValueError(f"Argument mode should be either 'min' or 'max'. Got {mode!r}.")
        self.score_function = score_function
        self.patience = int(patience)
        self.threshold = float(threshold)
        self.threshold_mode = threshold_mode
        self.cumulative = bool(cumulative)
        self.mode = mode
        self.trainer = trainer
        self.counter = 0
        self.best_score: float | None = None
        self.logger = logging.getLogger(f"{__name__}.{type(self).__name__}")

    # Ignite's deprecated names, kept readable and writable as in Ignite (with its warning)
    min_delta = _DeprecatedName("threshold")
    min_delta_mode = _DeprecatedName("threshold_mode")
    cumulative_delta = _DeprecatedName("cumulative")

    def __call__(self, engine: Engine) -> None:
        score = self.score_function(engine)

        if self.best_score is None:
            self.best_score = score
            return

        margin = -self.threshold if self.mode == "min" else self.threshold
        if self.threshold_mode == "abs":
            bar = self.best_score + margin
        else:
            bar = self.best_score * (1 + margin)
        no_improvement = score <= bar if self.mode == "max" else score >= bar

        if no_improvement:
            if not self.cumulative:  # a small gain still becomes the best
                self.best_score = max(score, self.best_score) if self.mode == "max" else min(score, self.best_score)
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

    def attach(
        self,
        engine: Engine,
        event: Any = Events.COMPLETED,
        reset_engine: Engine | None = None,
        reset_event: Any = Events.STARTED,
    ) -> None:
        """Check the score on `engine`'s `event` (an evaluator's COMPLETED) and `reset()` on `reset_engine`'s
        `reset_event` (the trainer's STARTED; `engine` when None), as Ignite's `attach` does."""
        engine.add_event_handler(event, self)
        (reset_engine or engine).add_event_handler(reset_event, self.reset)

    def state_dict(self) -> OrderedDict[str, Any]:
        """`counter` (evaluations without improvement so far), `best_score` (None before the first) and
        `threshold_mode`."""
        return OrderedDict(
            [("counter", self.counter), ("best_score", self.best_score), ("threshold_mode", self.threshold_mode)]
        )

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue from a `state_dict()` (ours or Ignite's): the next evaluation counts on from its counter."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(
                f"Argument state_dict should be a dictionary, but given {type(state_dict)}: pass the dict "
                "returned by EarlyStopping.state_dict()."
            )
        for key in self._state_dict_all_req_keys:
            if key not in state_dict:
                raise ValueError(
                    f"Required state attribute '{key}' is absent in provided state_dict '{state_dict.keys()}': "
                    "pass the dict returned by EarlyStopping.state_dict()."
                )
        counter = state_dict["counter"]
        if not is_integral(counter) or counter < 0:
            raise ValueError(f"state_dict['counter'] must be an integer >= 0, got {counter!r}.")
        self.counter = int(counter)
        self.best_score = state_dict["best_score"]
        self.threshold_mode = state_dict.get("threshold_mode", self.threshold_mode)


def _warn_deprecated(old: str, new: str) -> None:
    warnings.warn(
        f"{old} is deprecated and will be removed in a future version. Please use '{new}' instead.",
        DeprecationWarning,
        stacklevel=3,
    )
