"""Where `TensorBoardLogger` and Colossal-AI's `TensorboardHook` were first: both are the core's now
(`tracktrain.loggers.TensorBoardLogger`, `tracktrain.colossal.trainer.hooks.TensorboardHook`: they write through
torch's own `torch.utils.tensorboard`), importable from here as before.
"""

from __future__ import annotations

from tracktrain.colossal.trainer.hooks import TensorboardHook
from tracktrain.loggers.tensorboard_logger import TensorBoardLogger

__all__ = ["TensorBoardLogger", "TensorboardHook"]
