"""`EarlyStopping`: stop the trainer when an evaluation score has not improved for `patience` evaluations."""

from __future__ import annotations

import logging
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Literal

from tracktrain.checks.numeric import is_integral, is_real
from tracktrain.engine.engine import Engine
from tracktrain.engine.events import Events
from tracktrain.handlers.patience import ScorePatience

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


class EarlyStopping(ScorePatience):
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
    keeps counting (Ignite's layout: each library loads the other's). The decision (improvement, count, state) is
    `ScorePatience`'s, shared with the Trainer's `tracktrain.callbacks.EarlyStopping`; this face reads the score
    off an engine and terminates the trainer.

    .. code-block:: python

        handler = EarlyStopping(
            patience=10, score_function=lambda e: e.state.metrics["nll"], trainer=trainer, mode="min"
        )
        handler.attach(evaluator, reset_engine=trainer)  # checks on evaluator COMPLETED, resets on trainer STARTED
    """

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
        super().__init__(patience, mode, threshold, threshold_mode, cumulative)
        self.score_function = score_function
        self.trainer = trainer
        self.logger = logging.getLogger(f"{__name__}.{type(self).__name__}")

    # Ignite's deprecated names, kept readable and writable as in Ignite (with its warning)
    min_delta = _DeprecatedName("threshold")
    min_delta_mode = _DeprecatedName("threshold_mode")
    cumulative_delta = _DeprecatedName("cumulative")

    def __call__(self, engine: Engine) -> None:
        if self.check(self.score_function(engine)):
            return
        self.logger.debug("EarlyStopping: %i / %i", self.counter, self.patience)
        if self.exhausted:
            self.logger.info("EarlyStopping: Stop training")
            self.trainer.terminate()

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
        state = super().state_dict()
        state["threshold_mode"] = self.threshold_mode
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue from a `state_dict()` (ours or Ignite's): the next evaluation counts on from its counter."""
        super().load_state_dict(state_dict)
        self.threshold_mode = state_dict.get("threshold_mode", self.threshold_mode)


def _warn_deprecated(old: str, new: str) -> None:
    warnings.warn(
        f"{old} is deprecated and will be removed in a future version. Please use '{new}' instead.",
        DeprecationWarning,
        stacklevel=3,
    )
