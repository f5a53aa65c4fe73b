"""Experiment tracking: the `Logger` protocol, `TrackerRuns` (the one lifecycle of a job's loggers), the
non-blocking `QueuedLogger` base and its delivery worker, and the no-dependency `CSVLogger`. MLflow, W&B and
TensorBoard loggers are in `tracktrain_integrations`."""

from __future__ import annotations

from tracktrain._lazy import lazy_attributes

_LAZY = {
    "Logger": "tracktrain.loggers.base",
    "QueuedLogger": "tracktrain.loggers.base",
    "CSVLogger": "tracktrain.loggers.csv_logger",
    "LoggerBridge": "tracktrain.loggers.bridge",
    "DeliveryQueue": "tracktrain.loggers.delivery",
    "Record": "tracktrain.loggers.delivery",
    "TrackerRuns": "tracktrain.loggers.runs",
    "attach_loggers": "tracktrain.loggers.engine_logging",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY)
