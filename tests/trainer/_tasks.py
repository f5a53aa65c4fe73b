"""A small classification task and LoopModules (a classifier, a GAN stepped by hand) for the Trainer tests."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tracktrain import Callback, LoopModule


def make_loader(n: int = 64, batch_size: int = 8, seed: int = 0, shuffle: bool = False) -> DataLoader:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=shuffle)


class Classifier(LoopModule):
    """Linear classifier; logs train_loss per step and val_loss per epoch."""

    def __init__(self, lr: float = 0.1, seed: int | None = 0) -> None:
        super().__init__()
        if seed is not None:  # None: torch's generator as it is
            torch.manual_seed(seed)
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


class GAN(LoopModule):
    """Two optimizers stepped by hand, as in a GAN: D then G each batch."""

    automatic_optimization = False

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.generator = nn.Linear(2, 4)
        self.discriminator = nn.Linear(4, 1)

    def train_step(self, batch, batch_idx):
        real, _ = batch
        d_opt, g_opt = self.optimizers()
        fake = self.generator(torch.randn(real.shape[0], 2))
        d_loss = F.softplus(-self.discriminator(real)).mean() + F.softplus(self.discriminator(fake.detach())).mean()
        d_opt.zero_grad()
        self.backward(d_loss)
        self.clip_gradients(d_opt, gradient_clip_val=1.0, gradient_clip_algorithm="norm")
        d_opt.step()
        g_loss = F.softplus(-self.discriminator(fake)).mean()
        g_opt.zero_grad()
        self.backward(g_loss)
        g_opt.step()
        self.log_dict({"d_loss": d_loss, "g_loss": g_loss})

    def configure_optimizers(self):
        return [
            torch.optim.SGD(self.discriminator.parameters(), lr=0.1),
            torch.optim.SGD(self.generator.parameters(), lr=0.1),
        ]


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


class CrashAtStep(Callback):
    """Raises at global step `step` on every rank: a run stopped at the same step everywhere (the "kill")."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            raise RuntimeError("killed")
