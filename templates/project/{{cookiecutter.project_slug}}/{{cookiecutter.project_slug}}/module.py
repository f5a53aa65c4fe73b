"""The model and what one training and one validation step do: a `LoopModule` (tracktrain's LightningModule)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tracktrain import LoopModule

from {{ cookiecutter.project_slug }}.data import NUM_CLASSES, NUM_FEATURES


class Classifier(LoopModule):
    """An MLP classifier; logs train_loss every step, val_loss and val_accuracy every validation, and returns each
    validation batch's logits and targets (the confusion-matrix plot counts them)."""

    def __init__(self, hidden: int = 128, dropout: float = 0.1, lr: float = 0.05, momentum: float = 0.9) -> None:
        """The arguments are the config's `model:` settings (LightningCLI reads them from this signature)."""
        super().__init__()
        self.save_hyperparameters()  # self.hparams; the trackers record them, checkpoints keep them
        self.net = nn.Sequential(
            nn.Linear(NUM_FEATURES, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, NUM_CLASSES),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def train_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        return loss

    def eval_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), prog_bar=True)
        self.log("val_accuracy", (logits.argmax(dim=1) == y).float().mean(), prog_bar=True)
        return {"output": logits, "target": y}

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=self.hparams.momentum)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=self.trainer.max_epochs)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"}}
