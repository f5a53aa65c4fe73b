"""What the export tests share: the best checkpoint of a real fit, as ModelCheckpoint writes it."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from tracktrain import Trainer
from tracktrain.callbacks.model_checkpoint import ModelCheckpoint

from .trainer._tasks import Classifier, make_loader, quiet


def best_checkpoint_of_a_fit(tmp_path: Path, max_epochs: int = 3) -> str:
    """`best_model_path` of a Classifier fit for `max_epochs` epochs (by val_loss): its weights differ from a fresh
    Classifier's."""
    callback = ModelCheckpoint(dirpath=str(tmp_path / "checkpoints"), monitor="val_loss", save_top_k=1)
    trainer = Trainer(**{**quiet(tmp_path, max_epochs=max_epochs), "enable_checkpointing": True}, callbacks=[callback])
    trainer.fit(Classifier(), make_loader(), make_loader(seed=1))
    assert callback.best_model_path is not None
    return callback.best_model_path


class DataDependent(nn.Module):
    """Python control flow on a tensor's value: torch.export cannot trace it (it would need torch.cond)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return self.net(x)
        return -self.net(x)
