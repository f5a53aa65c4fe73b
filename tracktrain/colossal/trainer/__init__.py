"""Colossal-AI's `colossalai.trainer`: `Trainer(engine, timer, logger)` and its `hooks`."""

from __future__ import annotations

from tracktrain.colossal.trainer import hooks
from tracktrain.colossal.trainer.trainer import Trainer

__all__ = ["Trainer", "hooks"]
