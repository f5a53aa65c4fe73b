"""Ignite's `ignite.handlers.tensorboard_logger` under its path: `TensorboardLogger` and its handlers.

The handlers are tracker-independent (`tracktrain.handlers.base_logger`); `TensorboardLogger` is a face over
tracktrain's TensorBoard logger and needs the tensorboard package, so it lives with the integrations
(`tracktrain_integrations.ignite_loggers.tensorboard`): this module names it and imports it the first time it is
read, as Ignite's imports tensorboard only when the logger is made. Importing this module imports no integration.
"""

from __future__ import annotations

from tracktrain._lazy import lazy_attributes

_LAZY = {
    **dict.fromkeys(
        (
            "GradsHistHandler",
            "GradsScalarHandler",
            "OptimizerParamsHandler",
            "OutputHandler",
            "WeightsHistHandler",
            "WeightsScalarHandler",
        ),
        "tracktrain.handlers.base_logger",
    ),
    "global_step_from_engine": "tracktrain.handlers.global_step",
    "TensorboardLogger": "tracktrain_integrations.ignite_loggers.tensorboard",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY)
