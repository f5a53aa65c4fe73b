"""Run by torchrun (2 ranks): a DDP fit in which rank 1 is killed with SIGKILL at step 3, as a node failure or the
OOM killer would; rank 0 carries on into the next collective."""

import os
import signal
import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tracktrain import LoopModule, Trainer


class Lost(LoopModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(4, 2)

    def train_step(self, batch, batch_idx):
        if os.environ["RANK"] == "1" and batch_idx == 3:
            print(f"rank 1 is pid {os.getpid()}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
trainer = Trainer(
    max_epochs=2, strategy="ddp", default_root_dir=sys.argv[1], enable_progress_bar=False, enable_checkpointing=False
)
trainer.fit(Lost(), DataLoader(data, batch_size=4))
