"""Metrics that accumulate on the device and attach to an Engine (PyTorch-Ignite's Metric semantics).

Names are loaded on first use.
"""

from __future__ import annotations

from tracktrain._lazy import lazy_attributes
from tracktrain.ignite_names import refusal

_LAZY = {
    "Metric": "tracktrain.metrics.metric",
    "MetricUsage": "tracktrain.metrics.usage",
    "EpochWise": "tracktrain.metrics.usage",
    "RunningEpochWise": "tracktrain.metrics.usage",
    "BatchWise": "tracktrain.metrics.usage",
    "MetricsLambda": "tracktrain.metrics.metric",
    "NotComputableError": "tracktrain.metrics.metric",
    "RunningBatchWise": "tracktrain.metrics.usage",
    "SingleEpochRunningBatchWise": "tracktrain.metrics.usage",
    "all_reduce_sum": "tracktrain.metrics.distributed",
    "Accuracy": "tracktrain.metrics.accuracy",
    "TopKCategoricalAccuracy": "tracktrain.metrics.accuracy",
    "Loss": "tracktrain.metrics.loss",
    "Average": "tracktrain.metrics.average",
    "RunningAverage": "tracktrain.metrics.running_average",
    "MeanSquaredError": "tracktrain.metrics.regression",
    "MeanAbsoluteError": "tracktrain.metrics.regression",
    "RootMeanSquaredError": "tracktrain.metrics.regression",
    "GpuInfo": "tracktrain.metrics.gpu_info",
    "ClassificationMetric": "tracktrain.metrics.accuracy",
    "Precision": "tracktrain.metrics.precision",
    "Recall": "tracktrain.metrics.recall",
    "Fbeta": "tracktrain.metrics.fbeta",
    "PSNR": "tracktrain.metrics.psnr",
    "SSIM": "tracktrain.metrics.ssim",
    **dict.fromkeys(
        ("ConfusionMatrix", "DiceCoefficient", "IoU", "JaccardIndex", "cmAccuracy", "cmPrecision", "cmRecall", "mIoU"),
        "tracktrain.metrics.confusion_matrix",
    ),
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY, refused=refusal(__name__, "ignite.metrics"))
