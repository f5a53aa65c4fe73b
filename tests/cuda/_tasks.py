"""What the CUDA tests share (tests/cuda/): a small classification task on synthetic tensors, a LoopModule that
records what each training step saw, and quiet Trainer options. Only torch, pytest, tracktrain and the standard
library: the GPU machine these tests run on has no MLflow, W&B, moto or torchdata."""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tracktrain import LoopModule


def make_loader(n: int = 64, batch_size: int = 8, seed: int = 0, shuffle: bool = False, **kwargs) -> DataLoader:
    """`n` samples of 8 features, a label that 2 of them decide: a linear net learns it in a few epochs."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=generator)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=shuffle, **kwargs)


class Net(LoopModule):
    """Linear - tanh - dropout - linear, its weights seeded; each training step records (on the device, read back
    at the end) its loss, the autocast state inside it, and the dtype and device of its output and batch.

    `optimizer`: "sgd" or "adamw" (whose moments make the optimizer state worth comparing)."""

    def __init__(self, dropout: float = 0.0, optimizer: str = "sgd", lr: float = 0.1) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Dropout(dropout), nn.Linear(32, 2))
        self.optimizer_name = optimizer
        self.lr = lr
        self.losses: list[torch.Tensor] = []  # kept on the device: no sync per step
        self.seen: list[dict] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def train_step(self, batch, batch_idx):
        x, y = batch
        output = self(x)
        loss = F.cross_entropy(output, y)
        self.seen.append(
            {
                "autocast": torch.is_autocast_enabled(x.device.type),
                "autocast_dtype": torch.get_autocast_dtype(x.device.type),
                "output_dtype": output.dtype,
                "batch_device": x.device,
                "parameter_dtype": self.net[0].weight.dtype,
            }
        )
        self.losses.append(loss.detach())
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        if self.optimizer_name == "adamw":
            return torch.optim.AdamW(self.parameters(), lr=self.lr)
        return torch.optim.SGD(self.parameters(), lr=self.lr)

    def loss_values(self) -> list[float]:
        return torch.stack(self.losses).float().tolist()


def quiet(root: str | os.PathLike, **kwargs) -> dict:
    """Trainer arguments without a progress bar, a model summary or checkpoints, rooted in `root`."""
    options = {
        "enable_progress_bar": False,
        "enable_checkpointing": False,
        "enable_model_summary": False,
        "default_root_dir": root,
        "accelerator": "cuda",
    }
    return {**options, **kwargs}


def parameters(module: nn.Module) -> dict[str, torch.Tensor]:
    """The module's weights, detached copies."""
    return {name: tensor.detach().clone() for name, tensor in module.state_dict().items()}


def checkpoint_named(directory: Path, name: str) -> Path:
    """`directory/name`, which must be committed (its manifest beside it)."""
    path = Path(directory) / name
    assert path.exists() and Path(f"{path}.manifest.json").is_file(), sorted(os.listdir(directory))
    return path
