"""`LossTracker` and `AccuracyTracker`: epoch metrics computed from the steps' outputs (Colossal-AI's LossHook and
AccuracyHook), on `tracktrain.metrics`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from tracktrain.callbacks.base import Callback, CallbackPhase
from tracktrain.engine.events import Events
from tracktrain.metrics.accuracy import Accuracy
from tracktrain.metrics.average import Average
from tracktrain.metrics.loss import Loss
from tracktrain.metrics.metric import Metric, NotComputableError
from tracktrain.trainer.module import loss_in_output

if TYPE_CHECKING:
    from tracktrain.engine.engine import Engine
    from tracktrain.trainer.surface import TrainerSurface

__all__ = ["AccuracyTracker", "LossTracker", "loss_of_output", "prediction_and_target"]

_STAGES = ("fit", "validate", "test")


def loss_of_output(output: Any) -> torch.Tensor:
    """The loss in a step's output: the output itself, or its "loss" entry."""
    loss, found = loss_in_output(output)
    if loss is None:
        raise TypeError(
            f"LossTracker reads the loss from train_step's output, which was {found}. Return the loss or "
            "{'loss': loss, ...} from train_step, or pass LossTracker(output_transform=...) to pick it."
        )
    return loss


def prediction_and_target(output: Any) -> tuple[Any, Any]:
    """`(y_pred, y)` from a step's output: a dict with "output" and "target" (as `SupervisedModule.eval_step`
    returns) or "y_pred" and "y", or a `(y_pred, y)` pair."""
    if isinstance(output, Mapping):
        for prediction, target in (("output", "target"), ("y_pred", "y")):
            if prediction in output and target in output:
                return output[prediction], output[target]
        found = f"a dict with keys {sorted(output)}"
    elif isinstance(output, Sequence) and not isinstance(output, str) and len(output) == 2:
        return output[0], output[1]
    else:
        found = repr(output)[:100]
    raise TypeError(
        f"A metric tracker reads (y_pred, y) from the step's output, which was {found}. Return "
        "{'output': y_pred, 'target': y} from the step (as SupervisedModule does) or a (y_pred, y) tuple, or pass "
        "output_transform=... to pick them."
    )


class _MetricTracker(Callback):
    """One metric per stage, reset at each epoch start, updated with each step's output and computed at the
    epoch's end into `trainer.callback_metrics` (also the stage engine's `state.metrics`, so `validate()` and
    `test()` return it) and the Trainer's loggers.

    The handlers are attached through `event_handlers`, so the Trainer removes them at the end of each call:
    repeated fits never attach a metric twice.
    """

    # before the Trainer gathers the epoch's values, which copies engine.state.metrics into what validate() returns
    phase = CallbackPhase.METRICS

    def __init__(self, names: Mapping[str, str], stages: Iterable[str]) -> None:
        stages = (stages,) if isinstance(stages, str) else tuple(stages)
        unknown = [stage for stage in stages if stage not in names]
        if not stages or unknown:
            raise ValueError(
                f"{type(self).__name__}(stages=...) takes a non-empty subset of {list(names)}, got {list(stages)}."
            )
        self.names = {stage: names[stage] for stage in stages}
        self.metrics: dict[str, Metric] = {stage: self._new_metric(stage) for stage in stages}

    def _new_metric(self, stage: str) -> Metric:
        raise NotImplementedError

    def event_handlers(self, trainer: TrainerSurface) -> Iterable[tuple[str, Any, Callable]]:
        handlers: list[tuple[str, Any, Callable]] = []
        for stage, metric in self.metrics.items():
            name = self.names[stage]
            handlers += [
                (stage, Events.EPOCH_STARTED, metric.started),
                (stage, Events.ITERATION_COMPLETED, metric.iteration_completed),
                (stage, Events.EPOCH_COMPLETED, _completion(trainer, metric, name)),
            ]
        return handlers


def _completion(trainer: TrainerSurface, metric: Metric, name: str) -> Callable[[Engine], None]:
    def complete(engine: Engine) -> None:
        try:
            metric.completed(engine, name)  # compute(): the all-reduce and the one host sync of the epoch
        except NotComputableError:
            return  # an epoch without a single update has nothing to report
        # now in engine.state.metrics, which the Trainer copies to callback_metrics and publishes

    return complete


class LossTracker(_MetricTracker):
    """The mean training loss of each epoch as `train_loss_avg` (the mean of the steps' losses); with
    `loss_fn`, also the loss of the predictions over each validation and test run as `val_loss_avg` and
    `test_loss_avg` (a `tracktrain.metrics.Loss`: batch means weighted by batch size).

    Args:
        loss_fn: `loss_fn(y_pred, y)`, a batch's mean loss, for the validation and test stages.
        output_transform: picks the loss from `train_step`'s output (default: `loss_of_output`).
        eval_output_transform: picks `(y_pred, y)` from `eval_step`'s/`test_step`'s output (default:
            `prediction_and_target`).
        stages: which of "fit", "validate", "test" to track (default: "fit", and the others with `loss_fn`).
    """

    NAMES: ClassVar[dict[str, str]] = {"fit": "train_loss_avg", "validate": "val_loss_avg", "test": "test_loss_avg"}

    def __init__(
        self,
        loss_fn: Callable[..., torch.Tensor] | None = None,
        output_transform: Callable[[Any], Any] = loss_of_output,
        eval_output_transform: Callable[[Any], Any] = prediction_and_target,
        stages: Iterable[str] | None = None,
    ) -> None:
        for what, value in (("output_transform", output_transform), ("eval_output_transform", eval_output_transform)):
            if not callable(value):
                raise TypeError(f"LossTracker({what}=...) must be callable, got {value!r}.")
        if loss_fn is not None and not callable(loss_fn):
            raise TypeError(
                f"LossTracker(loss_fn=...) must be callable, e.g. torch.nn.CrossEntropyLoss(); got {loss_fn!r}."
            )
        if stages is None:
            stages = _STAGES if loss_fn is not None else ("fit",)
        stages = (stages,) if isinstance(stages, str) else tuple(stages)
        if loss_fn is None and set(stages) - {"fit"}:
            raise ValueError(
                f"LossTracker(stages={list(stages)}) tracks the loss of validation and test predictions with "
                "loss_fn(y_pred, y); pass loss_fn=..., e.g. torch.nn.CrossEntropyLoss()."
            )
        self.loss_fn = loss_fn
        self.output_transform = output_transform
        self.eval_output_transform = eval_output_transform
        super().__init__(self.NAMES, stages)

    def _new_metric(self, stage: str) -> Metric:
        if stage == "fit":
            return Average(output_transform=self.output_transform)
        assert self.loss_fn is not None  # __init__ refuses stages other than "fit" without a loss_fn
        return Loss(self.loss_fn, output_transform=self.eval_output_transform)


class AccuracyTracker(_MetricTracker):
    """The accuracy of the predictions over each validation and test run, as `val_accuracy` and `test_accuracy`
    (and `train_accuracy` over each training epoch with "fit" in `stages`, when `train_step` returns the
    predictions too), with `tracktrain.metrics.Accuracy`.

    Args:
        output_transform: picks `(y_pred, y)` from the steps' outputs (default: `prediction_and_target`).
        is_multilabel: see `Accuracy`.
        stages: which of "fit", "validate", "test" to track.
    """

    NAMES: ClassVar[dict[str, str]] = {"fit": "train_accuracy", "validate": "val_accuracy", "test": "test_accuracy"}

    def __init__(
        self,
        output_transform: Callable[[Any], Any] = prediction_and_target,
        is_multilabel: bool = False,
        stages: Iterable[str] = ("validate", "test"),
    ) -> None:
        if not callable(output_transform):
            raise TypeError(f"AccuracyTracker(output_transform=...) must be callable, got {output_transform!r}.")
        self.output_transform = output_transform
        self.is_multilabel = bool(is_multilabel)
        super().__init__(self.NAMES, stages)

    def _new_metric(self, stage: str) -> Metric:
        return Accuracy(output_transform=self.output_transform, is_multilabel=self.is_multilabel)
