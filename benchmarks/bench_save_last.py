#!/usr/bin/env python
"""The training loop's stall when two checkpoints are saved at the same step: the best one (`save_top_k=1`) and
the latest one (`save_last=True`), as the project template configures it. tracktrain's async `ModelCheckpoint`
with and without `save_last`, next to Lightning's `ModelCheckpoint(save_top_k=1, save_last=True)`, on a ~150 MB
state (an MLP of 12.6 M parameters and its AdamW moments) on local disk.

The stall is the wall time of each framework's checkpoint callback in `on_train_batch_end`, where both save (the
median over the saves of a fit). Each step sleeps 150 ms, standing for a real step's compute, so a background
write has ended before the next save and what is left is what the loop itself waits for.

    .venv/bin/python benchmarks/bench_save_last.py            # ~1 minute

Timing never makes this script fail; it exits with status 1 when a fit did not write the checkpoints expected.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

import harness as h
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from workloads import load_peer

from tracktrain import LoopModule, Trainer
from tracktrain.callbacks import ModelCheckpoint

STEPS, EVERY, STEP_SECONDS = 40, 5, 0.15


def network() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 1))


def batches() -> DataLoader:
    inputs = torch.randn(8 * STEPS, 2048, generator=torch.Generator().manual_seed(1))
    return DataLoader(TensorDataset(inputs), batch_size=8)


def timed(callback_class: type) -> type:
    class Timed(callback_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.stalls: list[float] = []

        def on_train_batch_end(self, trainer, *args, **kwargs):  # both frameworks: (trainer, module, ...)
            started = time.perf_counter()
            super().on_train_batch_end(trainer, *args, **kwargs)
            if trainer.global_step % EVERY == 0:  # a saving step
                self.stalls.append(time.perf_counter() - started)

    return Timed


class Regressor(LoopModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = network()

    def train_step(self, batch, batch_idx):
        time.sleep(STEP_SECONDS)
        return self.net(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


def tracktrain_stall(directory: str, save_last: bool) -> float:
    checkpoint = timed(ModelCheckpoint)(dirpath=directory, save_top_k=1, save_last=save_last, every_n_train_steps=EVERY)
    Trainer(
        max_steps=STEPS, callbacks=[checkpoint], enable_progress_bar=False, loggers=False, default_root_dir=directory
    ).fit(Regressor(), batches())
    expected = {f"checkpoint_{STEPS}.pt"} | ({f"last_checkpoint_{STEPS}.pt"} if save_last else set())
    _check(directory, expected)
    return statistics.median(checkpoint.stalls)


def lightning_stall(directory: str) -> float | None:
    lightning, _ = load_peer("lightning", "lightning.pytorch.callbacks")
    if lightning is None:
        return None

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = network()

        def training_step(self, batch, batch_idx):
            time.sleep(STEP_SECONDS)
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    checkpoint = timed(lightning.pytorch.callbacks.ModelCheckpoint)(
        dirpath=directory, save_top_k=1, save_last=True, every_n_train_steps=EVERY
    )
    trainer = lightning.Trainer(
        max_steps=STEPS,
        callbacks=[checkpoint],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
        default_root_dir=directory,
    )
    trainer.fit(Module(), train_dataloaders=batches())
    _check(directory, {"last.ckpt"})
    return statistics.median(checkpoint.stalls)


def _check(directory: str, expected: set[str]) -> None:
    names = set(os.listdir(directory))
    if not expected <= names:
        print(f"FAILED: {directory} holds {sorted(names)}, expected {sorted(expected)}", file=sys.stderr)
        sys.exit(1)


def main() -> None:
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-save-last-") as root:
        for name, measure in (
            ("tracktrain async, save_top_k=1", lambda d: tracktrain_stall(d, save_last=False)),
            ("tracktrain async, save_top_k=1 + save_last=True", lambda d: tracktrain_stall(d, save_last=True)),
            ("Lightning, save_top_k=1 + save_last=True", lightning_stall),
        ):
            directory = tempfile.mkdtemp(dir=root)
            stall = measure(directory)
            rows.append((name, stall))
    lines = [[f"checkpoint callback ({STEPS} steps, a save every {EVERY})", "loop stall per save (median)"]]
    lines += [[name, "n/a (not installed)" if stall is None else f"{stall * 1000:.0f} ms"] for name, stall in rows]
    print(h.markdown_table(lines, "lr"))


if __name__ == "__main__":
    main()
