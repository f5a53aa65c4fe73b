"""Lightning's `lightning.pytorch.core` under its path: the module and datamodule bases, by our names (the renames:
`LightningModule` is `LoopModule`, `LightningDataModule` is `DataModule`), for programs that import them from there."""

from __future__ import annotations

from tracktrain.trainer.datamodule import DataModule
from tracktrain.trainer.module import LoopModule

__all__ = ["DataModule", "LoopModule"]
