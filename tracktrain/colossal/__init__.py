"""Colossal-AI's engine-and-trainer API on tracktrain: `initialize`, `Trainer(engine, timer, logger)`, `hooks`,
`MultiTimer`, `get_dist_logger`, `get_dataloader` — so Colossal-AI's training scripts run with only their imports
changed::

    import tracktrain.colossal as colossalai
    from tracktrain.colossal import hooks, Trainer, MultiTimer, get_dist_logger

The Trainer here is a thin front for `tracktrain.Trainer` (`self.trainer` once `fit` ran): one implementation.
"""

from __future__ import annotations

from tracktrain.colossal import hooks
from tracktrain.colossal.trainer import Trainer
from tracktrain.distributed.data import get_dataloader
from tracktrain.distributed.logger import get_dist_logger
from tracktrain.engine.model_engine import initialize
from tracktrain.handlers.multi_timer import MultiTimer

__all__ = ["MultiTimer", "Trainer", "get_dataloader", "get_dist_logger", "hooks", "initialize"]
