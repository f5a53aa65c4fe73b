"""The LoopModule the Trainer benchmarks train: the hand-written loop's step, plus `self.log` of the loss."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tracktrain import LoopModule

LEARNING_RATE = 0.01  # every variant's SGD, the hand-written loops' included


class Classifier(LoopModule):
    """tracktrain's module: the hand-written step, plus `self.log` of the loss."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def train_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=LEARNING_RATE)
