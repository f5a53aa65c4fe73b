"""Ignite's `ignite.handlers.wandb_logger` under its path: `WandBLogger` and its handlers (Ignite's W&B handlers
take a deprecated `sync` argument and log strings too, so they are W&B's own).

`WandBLogger` is a face over tracktrain's W&B logger (its runs, its delivery that outlives an outage) and needs
wandb, so these live with the integrations (`tracktrain_integrations.ignite_loggers.wandb`): this module names them
and imports them the first time one is read. Importing this module imports no integration.
"""

from __future__ import annotations

from tracktrain._lazy import lazy_attributes

_LAZY = {
    **dict.fromkeys(
        ("OptimizerParamsHandler", "OutputHandler", "WandBLogger"), "tracktrain_integrations.ignite_loggers.wandb"
    ),
    "global_step_from_engine": "tracktrain.handlers.global_step",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY)
