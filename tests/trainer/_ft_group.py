"""One torchft replica group for tests/trainer/test_ft_ddp.py: trains a small MLP with `strategy="ft_ddp"`, prints
`step N participants P checksum C manager M` after every optimizer step (slowed by STEP_SLEEP so that the test can
kill it mid-fit; M: torchft's Manager step), and at the end saves its parameters and global step to OUT.

    python -m tests.trainer._ft_group GROUP GROUPS MAX_STEPS OUT [EVERY]    (TORCHFT_LIGHTHOUSE names the lighthouse)

EVERY: save a checkpoint every EVERY steps (ModelCheckpoint under `OUT.root`, all kept) and resume the newest
committed one (`Trainer(resume="auto")`), printing `resumed PATH STEP` as the training starts — the same command,
run again after a kill, continues the run. With HOLD_AT in the environment, the group stops after that step and
sleeps (at most 60 s: nothing waits forever) for the test to kill it there.
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tracktrain import Callback, LoopModule, Trainer
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.trainer.strategies import FTDDPStrategy

STEP_SLEEP = 0.05
HOLD_AT = "HOLD_AT"


class MLP(LoopModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))

    def train_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=0.01)
        # per step: the global step is healed from the peer; an epoch's end is each group's own (its loader's
        # position is not healed), so strategy="ft_ddp" refuses an "epoch" scheduler
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 50, 0.9)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class Progress(Callback):
    def __init__(self, strategy: FTDDPStrategy, hold_at: int | None) -> None:
        self.strategy = strategy
        self.hold_at = hold_at

    def on_train_start(self, trainer, module):
        print(f"resumed {trainer.ckpt_path} {trainer.global_step}", flush=True)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        manager = self.strategy.manager
        checksum = sum(float(p.double().sum()) for p in module.parameters())
        print(
            f"step {trainer.global_step} participants {manager.num_participants()} checksum {checksum!r} "
            f"manager {manager.current_step()}",
            flush=True,
        )
        if trainer.global_step == self.hold_at:
            print("holding", flush=True)
            time.sleep(60)
        time.sleep(STEP_SLEEP)


def main() -> None:
    group, groups, max_steps, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    every = int(sys.argv[5]) if len(sys.argv) > 5 else None
    hold_at = int(os.environ[HOLD_AT]) if HOLD_AT in os.environ else None
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(512, 8, generator=generator)
    y = (x[:, 0] - x[:, 1] > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    strategy = FTDDPStrategy(group=group, groups=groups)
    trainer = Trainer(
        strategy=strategy,
        max_steps=max_steps,
        max_epochs=None,
        seed=0,
        logger=False,
        enable_checkpointing=every is not None,
        resume="auto" if every is not None else None,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[Progress(strategy, hold_at)]
        + ([ModelCheckpoint(every_n_train_steps=every, save_top_k=-1, async_save=False)] if every else []),
        default_root_dir=f"{out}.root",
    )
    module = MLP()
    started = time.monotonic()
    trainer.fit(module, loader)
    print(f"done {trainer.global_step} in {time.monotonic() - started:.1f}s", flush=True)
    torch.save({"global_step": trainer.global_step, "params": module.state_dict()}, out)


if __name__ == "__main__":
    main()
