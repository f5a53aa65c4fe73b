"""The rank of tests/cuda/test_fsdp.py (started by `tracktrain.distributed.spawn`, so importable from here): three
fits of strategy="fsdp" on CUDA in one process — uninterrupted; stopped at a step after a sharded checkpoint; resumed
from that checkpoint by a new Trainer — each leaving its full weights and AdamW moments in `<out>/<name>.pt`."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict

from tracktrain import Callback, LoopModule, Trainer
from tracktrain.callbacks import ModelCheckpoint

from ._tasks import make_loader, quiet

STEPS = 15  # 64 samples, 8 per batch: 8 steps an epoch
SAVE_EVERY = 3
STOP_AT = 10  # the stopped fit dies here; it resumes from checkpoint_9.dcp
RESUMED_AT = 9


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.linear(x))


class BlockNet(LoopModule):
    """Blocks in an nn.ModuleList (each sharded on its own) between layers the root shards; dropout draws from the
    CUDA generator."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Linear(8, 16)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.dropout = nn.Dropout(0.2)
        self.head = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(self.dropout(x))

    def train_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.01)


class StopAt(Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            raise RuntimeError("killed")


def _fit(root: str, name: str, stop_at: int | None = None, ckpt_path: str | None = None) -> None:
    callbacks = [ModelCheckpoint(dirpath=os.path.join(root, "ckpt"), every_n_train_steps=SAVE_EVERY, save_top_k=None)]
    if stop_at is not None:
        callbacks.append(StopAt(stop_at))
    module = BlockNet()
    trainer = Trainer(**quiet(root, max_steps=STEPS, seed=5, strategy="fsdp", callbacks=callbacks))
    try:
        trainer.fit(module, make_loader(shuffle=True), ckpt_path=ckpt_path)
    except RuntimeError as error:
        if stop_at is None or "killed" not in str(error):
            raise
        return
    full = StateDictOptions(full_state_dict=True, cpu_offload=True)  # torch's own gathering, not the strategy's
    record = {
        "backend": dist.get_backend(),
        "world_size": dist.get_world_size(),
        "device": str(next(module.parameters()).device),
        "sharded": type(next(module.parameters())).__name__,
        "step": trainer.global_step,
        "ckpt_path": trainer.ckpt_path,
        "params": get_model_state_dict(module, options=full),
        "moments": get_optimizer_state_dict(module, trainer.optimizers[0], options=full)["state"],
    }
    torch.save(record, os.path.join(root, f"{name}.pt"))


def fits(out: str) -> None:
    """In the rank: the uninterrupted fit, the stopped one, and its resumption from checkpoint_9.dcp."""
    _fit(os.path.join(out, "full"), "trained")
    cut = os.path.join(out, "cut")
    _fit(cut, "stopped", stop_at=STOP_AT)
    _fit(cut, "trained", ckpt_path=os.path.join(cut, "ckpt", f"checkpoint_{RESUMED_AT}.dcp"))
