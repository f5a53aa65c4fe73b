"""`MetricsHub`: where a Trainer's logged values gather, per stage, and the one path they take to the loggers."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from tracktrain.engine.engine import Engine
from tracktrain.trainer.batches import batch_size_of
from tracktrain.trainer.fit_context import FitContext, current_epoch
from tracktrain.trainer.metric_log import MetricLog, scalar_values, to_floats

if TYPE_CHECKING:
    from tracktrain.trainer.strategies.base import Strategy
    from tracktrain.trainer.trainer_state import TrainerState

__all__ = ["MetricsHub"]


class MetricsHub:
    """The values of a Trainer's stages ("fit", "validate", "test"): what `self.log` records per step and per
    epoch (`logs`), the latest of each (`callback_metrics`), and the latest of those that go to the loggers
    (`logged_metrics`).

    Args:
        context: the fit's (whether it trains: the epoch and samples seen are logged axes then).
        state: the Trainer's (the global step: the values' step axis; the samples seen).
        train_engine: the training engine (the epoch axis).
        strategy: reduces values across ranks.
        send: `send(values, step)` hands published values to the loggers.
    """

    def __init__(
        self,
        context: FitContext,
        state: TrainerState,
        train_engine: Engine,
        strategy: Strategy,
        send: Callable[[Mapping[str, float], int], None],
    ) -> None:
        self._context, self._state, self._train_engine = context, state, train_engine
        self._send = send
        self.callback_metrics: dict[str, Any] = {}
        self._published: dict[str, float] = {}  # what reached the loggers, latest first
        self.progress_bar_names: set[str] = set()
        self.logs = {
            stage: MetricLog(
                stage, self.callback_metrics, self.progress_bar_names, stage == "fit", batch_size_of, strategy
            )
            for stage in ("fit", "validate", "test")
        }
        self.current = self.logs["fit"]  # the log `self.log` writes to: the stage running
        self._epoch_values: dict[str, dict[str, Any]] = {}
        self._discarding = False

    def start_over(self) -> None:
        """An entry point (`fit`, `validate`, `test`, `predict`) starts: the values of the one before are forgotten
        (`callback_metrics`, `logged_metrics`, the progress bar's), as Lightning forgets them at each."""
        self.callback_metrics.clear()  # in place: the stages' logs hold these very containers
        self._published.clear()
        self.progress_bar_names.clear()
        self._epoch_values.clear()
        for log in self.logs.values():
            log.reset()

    def enter_stage(self, stage: str) -> None:
        """A stage's period starts (a training epoch, an evaluation run): its values start over."""
        self.current = self.logs[stage]
        self.current.reset()

    def leave_stage(self, log: MetricLog) -> None:
        """Back to the stage that ran before (an evaluation inside a fit returns to the fit's log)."""
        self.current = log

    def reduce_epoch(self, stage: str, engine: Engine, extra: Mapping[str, Any]) -> None:
        """The epoch's values: what was logged, and the Ignite metrics attached to its engine, with `extra`."""
        metrics = {
            **scalar_values(engine.state.metrics),
            **extra,
        }  # Ignite metrics attached to the engine (and trackers)
        if stage != "fit":
            self.logs[stage].forget_step_values()
        self.callback_metrics.update(metrics)
        self._epoch_values[stage] = {**self.logs[stage].epoch_values(), **metrics}

    def publish_epoch(self, stage: str) -> None:
        """Publish the epoch's values, with what its epoch-end hooks logged since (also in what `validate()`/`test()`
        return: a metric computed in `on_validation_epoch_end` is among them, as in Lightning)."""
        values = {**self._epoch_values.get(stage, {}), **self.logs[stage].epoch_values()}
        if stage in self._epoch_values:
            self._epoch_values[stage] = values
        self.publish(values)

    def take_epoch_values(self, stage: str) -> dict[str, Any]:
        """The values of `stage`'s last epoch (what `validate()`/`test()` return), forgotten here."""
        return self._epoch_values.pop(stage, {})

    @contextmanager
    def discarding(self) -> Iterator[None]:
        """Values logged inside are dropped when it ends (the sanity check's): nothing reaches the loggers, and
        `callback_metrics`, `logged_metrics` and the progress bar's names are as they were before."""
        callback_metrics, published = dict(self.callback_metrics), dict(self._published)
        progress_bar_names = set(self.progress_bar_names)
        self._discarding = True
        try:
            yield
        finally:
            self._discarding = False
            # restored in place: the stages' logs hold these very containers
            self.callback_metrics.clear()
            self.callback_metrics.update(callback_metrics)
            self._published.clear()
            self._published.update(published)
            self.progress_bar_names.clear()
            self.progress_bar_names.update(progress_bar_names)
            self._epoch_values.pop("validate", None)

    def publish_evaluation_step(self, stage: str) -> None:
        """What `stage`'s step logged with `on_step=True` (nothing otherwise: no cost), published at Lightning's step
        for it: the batches of this loader in the pass so far."""
        log = self.logs[stage]
        if log.has_step_values:
            self.publish(log.step_values(), step=log.batches_seen - 1)

    def publish(self, values: Mapping[str, Any], step: int | None = None) -> None:
        """The one path logged values take to `logged_metrics` and the loggers (read from the device here), at the
        current global step (or `step`); while fitting, with the epoch and the samples seen as axes too."""
        if not values or self._discarding:
            return
        floats = to_floats(dict(values))
        self._published.update(floats)
        fitting = self._context.fitting
        if fitting:  # the same axes for every tracker: the step, and the epoch and samples behind it
            floats = {
                **floats,
                "epoch": float(current_epoch(self._train_engine, fitting)),
                "samples_seen": float(self._state.samples_seen),
            }
        self._send(floats, self._state.global_step if step is None else step)

    @property
    def logged_metrics(self) -> dict[str, float]:
        """The latest value of each name logged for the loggers (`logger=True`), as Lightning's: what reached them,
        and the training step's own values at every step, not only every `log_every_n_steps` (read from the device
        only here, when asked for; a `sync_dist` value under several processes once it is published, reduced)."""
        return {**self._published, **to_floats(self.logs["fit"].latest_step_values())}

    def progress_bar_metrics(self) -> dict[str, Any]:
        """The latest values logged with `prog_bar=True` (tensors; read them only when shown)."""
        return {name: self.callback_metrics[name] for name in self.progress_bar_names if name in self.callback_metrics}
