"""Experiment tracking: the `Logger` protocol, `TrackerRuns` (the one lifecycle of a job's loggers), the
non-blocking `QueuedLogger` base and its delivery worker, and the no-dependency `CSVLogger`.

The trackers' loggers live in `tracktrain_integrations` (each imports its library, and fails with the extra to
install when it is missing); their names are here too, as Lightning's `lightning.pytorch.loggers` has them, so that a
ported `from tracktrain.loggers import WandbLogger` works. Only reading such a name imports its integration: the
package itself imports none.
"""

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
    # the trackers' loggers, by Lightning's names (MLFlowLogger) and ours (MLflowLogger)
    "MLflowLogger": "tracktrain_integrations.mlflow",
    "MLFlowLogger": "tracktrain_integrations.mlflow",
    "WandbLogger": "tracktrain_integrations.wandb",
    "TensorBoardLogger": "tracktrain.loggers.tensorboard_logger",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY)
