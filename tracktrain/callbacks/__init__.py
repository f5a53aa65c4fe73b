"""Callbacks for the Trainer: each hook is an Engine event; each built-in callback lives in its own module."""

from __future__ import annotations

from tracktrain._lazy import lazy_attributes

_LAZY = {
    "Callback": "tracktrain.callbacks.base",
    "ConfusionMatrixPlot": "tracktrain.callbacks.classification_plots",
    "AccuracyTracker": "tracktrain.callbacks.metric_tracking",
    "EMA": "tracktrain.callbacks.weight_averaging",
    "EarlyStopping": "tracktrain.callbacks.early_stopping",
    "EarlyStoppingReason": "tracktrain.callbacks.early_stopping",
    "LearningRateMonitor": "tracktrain.callbacks.lr_monitor",
    "LossTracker": "tracktrain.callbacks.metric_tracking",
    "MemoryMonitor": "tracktrain.callbacks.memory",
    "MetricPrinter": "tracktrain.callbacks.metric_printer",
    "ModelCheckpoint": "tracktrain.callbacks.model_checkpoint",
    "ModelSummary": "tracktrain.callbacks.model_summary",
    "Profiler": "tracktrain.callbacks.profiler",
    "SWA": "tracktrain.callbacks.weight_averaging",
    "Timing": "tracktrain.callbacks.timing",
    "TQDMProgressBar": "tracktrain.callbacks.progress",
    "TrainerProgressBar": "tracktrain.callbacks.progress",
    "WeightAveraging": "tracktrain.callbacks.weight_averaging",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY)
