"""A small training run that checkpoints every 3 iterations and resumes from the newest checkpoint it finds.

    python _train_script.py --dir CHECKPOINTS --out REPORT_DIR [--engine deterministic|plain] [--sleep SECONDS]

Writes REPORT_DIR/final.pt (the model's final state dict) and REPORT_DIR/report.json (where it resumed from,
which iterations it ran, where its epochs ended). test_checkpoint_crash.py SIGKILLs it mid-epoch and runs it
again, as a user whose job was preempted would.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tracktrain.engine import DeterministicEngine, Engine, Events
from tracktrain.handlers import Checkpoint, DiskSaver

EPOCHS = 4  # of 8 iterations each


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--engine", choices=["deterministic", "plain"], default="deterministic")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds per iteration, to give a killer time")
    args = parser.parse_args()
    torch.set_num_threads(1)

    torch.manual_seed(0)
    x = torch.randn(64, 4)
    y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(64, 1)
    loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.5)

    def train_step(engine: Engine, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        model.train()
        inputs, targets = batch
        optimizer.zero_grad()
        loss = (model(inputs) - targets).pow(2).mean()
        loss.backward()
        optimizer.step()
        lr_scheduler.step()
        if args.sleep:
            time.sleep(args.sleep)
        return loss.detach()

    trainer = (DeterministicEngine if args.engine == "deterministic" else Engine)(train_step)
    to_save = {"trainer": trainer, "model": model, "optimizer": optimizer, "lr_scheduler": lr_scheduler}
    checkpoint = Checkpoint(to_save, DiskSaver(args.dir, require_empty=False), n_saved=2)
    trainer.add_event_handler(Events.ITERATION_COMPLETED(every=3), checkpoint)

    resumed_from = 0
    last = Checkpoint.get_last_checkpoint(args.dir)
    if last is not None:
        Checkpoint.load_objects(to_save, last)
        resumed_from = trainer.state.iteration

    iterations: list[int] = []
    epochs_ended_at: list[int] = []
    trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda e: iterations.append(e.state.iteration))
    trainer.add_event_handler(Events.EPOCH_COMPLETED, lambda e: epochs_ended_at.append(e.state.iteration))
    trainer.run(loader, max_epochs=EPOCHS, seed=12)

    os.makedirs(args.out, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(args.out, "final.pt"))
    report = {
        "resumed_from": resumed_from,
        "last_checkpoint": last,
        "iterations": iterations,
        "epochs_ended_at": epochs_ended_at,
        "final_iteration": trainer.state.iteration,
        "final_epoch": trainer.state.epoch,
    }
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
