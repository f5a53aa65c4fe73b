"""`EarlyStopping`: stop `fit` when a logged metric stops improving, crosses a threshold, or is not finite."""

from __future__ import annotations

import enum
import logging
import math
import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tracktrain.callbacks.base import Callback, CallbackPhase
from tracktrain.checks.numeric import is_integral, is_real
from tracktrain.distributed.boundary import Boundary, Decision
from tracktrain.handlers.patience import ScorePatience
from tracktrain.trainer.monitor import monitored_value

if TYPE_CHECKING:
    from tracktrain.trainer.surface import TrainerSurface

__all__ = ["EarlyStopping", "EarlyStoppingReason"]

_logger = logging.getLogger(__name__)


class EarlyStoppingReason(enum.Enum):
    """Why `EarlyStopping` stopped the run (or `NOT_STOPPED`)."""

    NOT_STOPPED = "not_stopped"
    PATIENCE_EXHAUSTED = "patience_exhausted"
    STOPPING_THRESHOLD = "stopping_threshold"
    DIVERGENCE_THRESHOLD = "divergence_threshold"
    NON_FINITE_METRIC = "non_finite_metric"


class EarlyStopping(Callback):
    """Stops `trainer.fit` (with `trainer.train_engine.terminate()`) when `monitor` has not improved for
    `patience` checks in a row, as Lightning's EarlyStopping.

    A check reads `trainer.callback_metrics[monitor]` at the end of each validation during `fit`, or at the
    end of each training epoch when the fit has no validation (or with `check_on_train_epoch_end=True`). A value
    improves on the best when it is lower by more than `min_delta` (`mode="min"`), or higher (`"max"`).

    Args:
        monitor: the logged metric to watch.
        min_delta: the smallest change that counts as an improvement (>= 0).
        patience: checks without improvement to allow before stopping (>= 1).
        mode: "min" or "max": which way is better.
        check_finite: stop as soon as the metric is NaN or infinite.
        stopping_threshold: stop as soon as the metric is better than this.
        divergence_threshold: stop as soon as the metric is worse than this.
        check_on_train_epoch_end: check at training epoch ends (True) or validation ends (False); None: at
            validation ends when `fit` was given validation data, else at training epoch ends.
        verbose: log each improvement of the best score (the stop is logged either way).
        strict: a check without the monitored metric logged is an error (False: a warning, once, and no check).
        log_rank_zero_only: with `verbose`, only rank 0 logs.

    Under torch.distributed each rank checks its own value and the run stops on every rank as soon as one asks:
    the check is a `Decision` the Trainer agrees on with the boundary's others, so no rank waits for another that
    has stopped. `state_dict()` (wait count,
    best score, stopped epoch) is saved in the Trainer's checkpoints, so a resumed run keeps counting.

    Whether a value improves, the wait count and the best score are those of `patience_counter`, a
    `tracktrain.handlers.patience.ScorePatience` (the decision Ignite's `EarlyStopping` makes too) set up as
    Lightning's: the best starts at the worst value, only a gain of more than `min_delta` moves it (cumulative),
    and a NaN never improves. The thresholds and the finite check, Lightning's own, are checked here first.
    """

    phase = CallbackPhase.AFTER_DECISIONS  # as ModelCheckpoint: after the hooks, which may log what is monitored

    def __init__(
        self,
        monitor: str,
        min_delta: float = 0.0,
        patience: int = 3,
        mode: str = "min",
        check_finite: bool = True,
        stopping_threshold: float | None = None,
        divergence_threshold: float | None = None,
        check_on_train_epoch_end: bool | None = None,
        verbose: bool = False,
        strict: bool = True,
        log_rank_zero_only: bool = False,
    ) -> None:
        for name, flag in (("verbose", verbose), ("strict", strict), ("log_rank_zero_only", log_rank_zero_only)):
            if not isinstance(flag, bool):
                raise TypeError(f"EarlyStopping({name}=...) must be True or False, got {flag!r}.")
        self.verbose, self.strict, self.log_rank_zero_only = verbose, strict, log_rank_zero_only
        self._warned_missing = False
        if not isinstance(monitor, str) or not monitor:
            raise TypeError(f"EarlyStopping(monitor=...) must be the name of a logged metric, got {monitor!r}.")
        if mode not in ("min", "max"):
            raise ValueError(f'EarlyStopping(mode=...) must be "min" or "max", got {mode!r}.')
        if not is_real(min_delta) or isinstance(min_delta, bool) or not min_delta >= 0:
            raise ValueError(
                f"EarlyStopping(min_delta=...) must be a number >= 0 (its direction follows mode), got {min_delta!r}."
            )
        if not is_integral(patience) or isinstance(patience, bool) or patience < 1:
            raise ValueError(f"EarlyStopping(patience=...) must be a positive integer, got {patience!r}.")
        for name, value in (("stopping_threshold", stopping_threshold), ("divergence_threshold", divergence_threshold)):
            if value is not None and (not is_real(value) or isinstance(value, bool)):
                raise TypeError(f"EarlyStopping({name}=...) must be a number or None, got {value!r}.")
        if check_on_train_epoch_end not in (None, True, False):
            raise TypeError(
                "EarlyStopping(check_on_train_epoch_end=...) must be True, False or None, got "
                f"{check_on_train_epoch_end!r}."
            )
        self.monitor = monitor
        self.patience_counter = ScorePatience(
            patience,
            "min" if mode == "min" else "max",
            threshold=min_delta,
            cumulative=True,
            best_score=math.inf if mode == "min" else -math.inf,
            nan_improves=False,
        )
        self.check_finite = bool(check_finite)
        self.stopping_threshold = None if stopping_threshold is None else float(stopping_threshold)
        self.divergence_threshold = None if divergence_threshold is None else float(divergence_threshold)
        self.check_on_train_epoch_end = check_on_train_epoch_end
        self.stopped_epoch = 0
        self.stopping_reason = EarlyStoppingReason.NOT_STOPPED
        self.stopping_reason_message: str | None = None
        self._message: str | None = None  # why this rank proposed to stop, at the last check

    # Lightning's names for the shared counter's settings and state
    @property
    def mode(self) -> str:
        return self.patience_counter.mode

    @property
    def min_delta(self) -> float:
        return self.patience_counter.threshold

    @min_delta.setter
    def min_delta(self, value: float) -> None:
        self.patience_counter.threshold = float(value)

    @property
    def patience(self) -> int:
        return self.patience_counter.patience

    @patience.setter
    def patience(self, value: int) -> None:
        self.patience_counter.patience = int(value)

    @property
    def wait_count(self) -> int:
        """Checks in a row without improvement."""
        return self.patience_counter.counter

    @wait_count.setter
    def wait_count(self, value: int) -> None:
        self.patience_counter.counter = int(value)

    @property
    def best_score(self) -> float:
        """The best value so far (the worst possible before the first)."""
        best = self.patience_counter.best_score
        assert best is not None  # it starts at ±inf
        return best

    @best_score.setter
    def best_score(self, value: float) -> None:
        self.patience_counter.best_score = float(value)

    # ------------------------------------------------------------------------------------------------ checks
    def decisions(self, trainer: TrainerSurface) -> Iterable[Decision]:
        """One check per validation or per training epoch of fit, agreed by all ranks: any rank's stop stops all."""
        at_epoch_end = self.check_on_train_epoch_end
        if at_epoch_end is None:
            at_epoch_end = trainer.val_dataloaders is None
        boundary = Boundary.TRAIN_EPOCH_END if at_epoch_end else Boundary.VALIDATION_END
        return [
            Decision(
                boundary,
                f"EarlyStopping({self.monitor})",
                propose=lambda: self._propose(trainer),
                agree="any",
                act=lambda agreed: self._act(trainer, agreed),
            )
        ]

    def _propose(self, trainer: TrainerSurface) -> bool:
        if not self.strict and self.monitor not in trainer.callback_metrics:  # Lightning's strict=False: no check
            if not self._warned_missing:
                self._warned_missing = True
                warnings.warn(
                    f"EarlyStopping(strict=False): {self.monitor!r} is not logged (logged: "
                    f"{sorted(trainer.callback_metrics)}); the check is skipped until it is.",
                    stacklevel=2,
                )
            return False
        current = monitored_value(trainer.callback_metrics, self.monitor, "EarlyStopping")  # the check's one sync
        best_before = self.best_score
        should_stop, self._message = self._evaluate(current)
        if self.verbose and (not self.log_rank_zero_only or trainer.is_global_zero) and self.best_score != best_before:
            _logger.info("Metric %s improved to %.6g (was %.6g).", self.monitor, self.best_score, best_before)
        return should_stop

    def _act(self, trainer: TrainerSurface, agreed: float) -> None:
        if not agreed:
            return
        self.stopped_epoch = trainer.current_epoch
        message = self._message
        if self.stopping_reason is EarlyStoppingReason.NOT_STOPPED:  # stopped because another rank asked
            message = f"Another process asked to stop (its {self.monitor} met a stopping condition)."
        self.stopping_reason_message = message
        _logger.info("EarlyStopping at epoch %d: %s", self.stopped_epoch, message)
        trainer.stop(agreed=True)  # agreed on by every rank at the boundary

    def _better(self, value: float, than: float) -> bool:
        return value < than if self.mode == "min" else value > than

    def _evaluate(self, current: float) -> tuple[bool, str | None]:
        """Whether to stop after seeing `current`, and why; updates the best score and the wait count."""
        sign = "<" if self.mode == "min" else ">"
        if self.check_finite and not math.isfinite(current):
            self.stopping_reason = EarlyStoppingReason.NON_FINITE_METRIC
            return True, (
                f"Monitored metric {self.monitor} = {current} is not finite. Previous best value was "
                f"{self.best_score:.3f}. Signaling Trainer to stop."
            )
        if self.stopping_threshold is not None and self._better(current, self.stopping_threshold):
            self.stopping_reason = EarlyStoppingReason.STOPPING_THRESHOLD
            return True, (
                f"Stopping threshold reached: {self.monitor} = {current} {sign} {self.stopping_threshold}. "
                "Signaling Trainer to stop."
            )
        if self.divergence_threshold is not None and self._better(-current, -self.divergence_threshold):
            self.stopping_reason = EarlyStoppingReason.DIVERGENCE_THRESHOLD
            return True, (
                f"Divergence threshold reached: {self.monitor} = {current} {'>' if sign == '<' else '<'} "
                f"{self.divergence_threshold}. Signaling Trainer to stop."
            )
        if self.patience_counter.check(current):
            return False, None
        if self.patience_counter.exhausted:
            self.stopping_reason = EarlyStoppingReason.PATIENCE_EXHAUSTED
            return True, (
                f"Monitored metric {self.monitor} did not improve in the last {self.wait_count} records. Best score: "
                f"{self.best_score:.3f}. Signaling Trainer to stop."
            )
        return False, None

    # ------------------------------------------------------------------------------------------------- state
    @property
    def state_key(self) -> str:
        """Two EarlyStoppings on different metrics or modes keep separate states in a checkpoint."""
        return f"EarlyStopping{{'monitor': {self.monitor!r}, 'mode': {self.mode!r}}}"

    def state_dict(self) -> dict[str, Any]:
        return {
            "wait_count": self.wait_count,
            "stopped_epoch": self.stopped_epoch,
            "best_score": self.best_score,
            "patience": self.patience,
            "stopping_reason": self.stopping_reason.value,
            "stopping_reason_message": self.stopping_reason_message,
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        missing = [key for key in ("wait_count", "stopped_epoch", "best_score") if key not in state_dict]
        if missing:
            raise KeyError(
                f"EarlyStopping.load_state_dict: {missing} missing from the given state (keys {sorted(state_dict)}); "
                "pass what EarlyStopping.state_dict() returned."
            )
        self.patience_counter.load_state_dict(
            {"counter": int(state_dict["wait_count"]), "best_score": float(state_dict["best_score"])}
        )
        self.stopped_epoch = int(state_dict["stopped_epoch"])
        self.patience = int(state_dict.get("patience", self.patience))
        self.stopping_reason = EarlyStoppingReason(state_dict.get("stopping_reason", "not_stopped"))
        self.stopping_reason_message = state_dict.get("stopping_reason_message")
