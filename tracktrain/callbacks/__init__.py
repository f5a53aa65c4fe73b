"""The Trainer's built-in callbacks (checkpoints, early stopping, progress, model summary, metric, LR, memory and
timing monitors, plots, weight averaging, profiling), each in its own module, and the `Callback` base they share
(defined with the Trainer that calls it, `tracktrain.trainer.callback`)."""

from __future__ import annotations

import dis
import sys
from typing import Any

from tracktrain._lazy import lazy_attributes

_LAZY = {
    "Callback": "tracktrain.callbacks.base",
    "CallbackPhase": "tracktrain.callbacks.base",
    "ConfusionMatrixPlot": "tracktrain.callbacks.classification_plots",
    "AccuracyTracker": "tracktrain.callbacks.metric_tracking",
    "EMA": "tracktrain.callbacks.weight_averaging",
    "EMAWeightAveraging": "tracktrain.callbacks.weight_averaging",
    "StochasticWeightAveraging": "tracktrain.callbacks.weight_averaging",
    "LambdaCallback": "tracktrain.callbacks.lambda_callback",
    "BasePredictionWriter": "tracktrain.callbacks.prediction_writer",
    "EarlyStopping": "tracktrain.callbacks.early_stopping",
    "EarlyStoppingReason": "tracktrain.callbacks.early_stopping",
    "GradientAccumulationScheduler": "tracktrain.callbacks.gradient_accumulation",
    "LearningRateMonitor": "tracktrain.callbacks.lr_monitor",
    "LossTracker": "tracktrain.callbacks.metric_tracking",
    "MemoryMonitor": "tracktrain.callbacks.memory",
    "MetricPrinter": "tracktrain.callbacks.metric_printer",
    "ModelCheckpoint": "tracktrain.callbacks.model_checkpoint",
    "ModelSummary": "tracktrain.callbacks.model_summary",
    "Profiler": "tracktrain.callbacks.profiler",
    "RichModelSummary": "tracktrain.callbacks.rich",
    "RichProgressBar": "tracktrain.callbacks.rich",
    "RichProgressBarTheme": "tracktrain.callbacks.rich",
    "SWA": "tracktrain.callbacks.weight_averaging",
    "Timing": "tracktrain.callbacks.timing",
    "TQDMProgressBar": "tracktrain.callbacks.progress",
    "TrainerSurface": "tracktrain.callbacks.base",
    "TrainerProgressBar": "tracktrain.callbacks.progress",
    "WeightAveraging": "tracktrain.callbacks.weight_averaging",
}

__all__ = sorted(_LAZY)


_lazy_getattr, __dir__ = lazy_attributes(__name__, globals(), _LAZY)


def __getattr__(name: str) -> Any:
    """Ours (imported on first use); a Lightning callback we do not have under its name says what to use: an
    ImportError for `from tracktrain.callbacks import Name` (Python would drop an AttributeError's message there), an
    AttributeError for `tracktrain.callbacks.Name` (so `hasattr` stays False)."""
    if name in _LAZY:
        return _lazy_getattr(name)
    from tracktrain.trainer.lightning_names import CALLBACKS_INSTEAD

    instead = CALLBACKS_INSTEAD.get(name)
    if instead is None:
        return _lazy_getattr(name)  # its AttributeError
    message = f"tracktrain.callbacks has no {name} (Lightning's lightning.pytorch.callbacks.{name}): {instead}."
    caller = sys._getframe(1)
    if caller.f_code.co_code[caller.f_lasti] == _IMPORT_FROM:
        raise ImportError(message, name=__name__)
    raise AttributeError(message)


_IMPORT_FROM = dis.opmap["IMPORT_FROM"]
