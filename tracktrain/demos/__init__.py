"""Ready-made modules, datasets and datamodules for trying tracktrain out and for tests: Lightning's
`lightning.pytorch.demos` under the same names (`BoringModel`, `Transformer`, `WikiText2`, ...), written as
tracktrain `LoopModule`s and `DataModule`s. MNIST is in `tracktrain.demos.mnist_datamodule` (it needs torchvision).
"""

from __future__ import annotations

from tracktrain.demos.boring_classes import BoringDataModule, BoringModel, DemoModel
from tracktrain.demos.lstm import LightningLSTM, SequenceSampler, SimpleLSTM
from tracktrain.demos.transformer import LightningTransformer, Transformer, WikiText2

__all__ = [
    "BoringDataModule",
    "BoringModel",
    "DemoModel",
    "LightningLSTM",
    "LightningTransformer",
    "SequenceSampler",
    "SimpleLSTM",
    "Transformer",
    "WikiText2",
]
