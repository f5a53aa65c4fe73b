"""Ignite's `ignite.handlers.mlflow_logger` under its path: `MLflowLogger` and its handlers.

The handlers are tracker-independent (`tracktrain.handlers.base_logger`); `MLflowLogger` is a face over
tracktrain's MLflow logger (its runs, its delivery that outlives an outage) and needs mlflow, so it lives with the
integrations (`tracktrain_integrations.ignite_loggers.mlflow`): this module names it and imports it the first time
it is read, as Ignite's imports mlflow only when the logger is made. Importing this module imports no integration.
"""

from __future__ import annotations

from tracktrain._lazy import lazy_attributes

_LAZY = {
    "OptimizerParamsHandler": "tracktrain.handlers.base_logger",
    "OutputHandler": "tracktrain.handlers.base_logger",
    "global_step_from_engine": "tracktrain.handlers.global_step",
    "MLflowLogger": "tracktrain_integrations.ignite_loggers.mlflow",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY)
