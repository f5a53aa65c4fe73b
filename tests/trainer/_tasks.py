"""A small classification task and LoopModules for the Trainer tests."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tracktrain import LoopModule


def make_loader(n: int = 64, batch_size: int = 8, seed: int = 0, shuffle: bool = False) -> DataLoader:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=shuffle)


class Classifier(LoopModule):
    """Linear classifier; logs train_loss per step and val_loss per epoch."""

    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Linear(4, 2)
        self.lr = lr

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def train_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def eval_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


@pytest.fixture
def loader() -> DataLoader:
    return make_loader()


def quiet(tmp_path, **kwargs):
    """Trainer arguments without a progress bar or checkpoints, rooted in tmp_path."""
    return {"enable_progress_bar": False, "enable_checkpointing": False, "default_root_dir": tmp_path, **kwargs}


def checkpoint_files(directory) -> list[str]:
    """The checkpoint data files in `directory`, each checked to have its manifest beside it (committed)."""
    names = sorted(os.listdir(directory))
    data = [name for name in names if name.endswith(".pt")]
    for name in data:
        assert f"{name}.manifest.json" in names, f"{name} has no manifest: it was not committed"
    assert len(names) == 2 * len(data), f"stray files in {directory}: {names}"
    return data
