#!/usr/bin/env python
"""The training loop's stall when two checkpoints are saved at the same step: the best one (`save_top_k=1`) and
the latest one (`save_last=True`), as the project template configures it. tracktrain's async `ModelCheckpoint`
with and without `save_last`, next to Lightning's `ModelCheckpoint(save_top_k=1, save_last=True)`, on a ~150 MB
state (an MLP of 12.6 M parameters and its AdamW moments) on local disk.

The stall is the wall time of each framework's checkpoint callback in `on_train_batch_end`, where both save; a
sample is its median over the saves of one fit, and the fits run interleaved, `--repeats` of each. Each step sleeps
`--step-ms` (150; --quick 20), standing for a real step's compute, so a background write has ended before the next
save and what is left is what the loop itself waits for.

    .venv/bin/python benchmarks/bench_save_last.py --quick   # smoke test (~2 s): a 256-wide MLP
    .venv/bin/python benchmarks/bench_save_last.py           # ~1.5 minutes

Timing never makes this script fail; it exits with status 1 when a fit did not write the checkpoints expected.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import harness as h
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from workloads import lightning_trainer, lightning_twin, load_peer

from tracktrain import LoopModule, Trainer
from tracktrain.callbacks import ModelCheckpoint


class RegressorCode:
    """The module both frameworks fit (Lightning's is `lightning_twin` of it)."""

    def __init__(self, width: int, step_s: float) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU())
        self.step_s = step_s

    def train_step(self, batch, batch_idx):
        time.sleep(self.step_s)
        return self.net(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


class Regressor(RegressorCode, LoopModule):
    pass


def timed(callback_class: type, every: int) -> type:
    class Timed(callback_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.stalls: list[float] = []

        def on_train_batch_end(self, trainer, *args, **kwargs):  # both frameworks: (trainer, module, ...)
            started = time.perf_counter()
            super().on_train_batch_end(trainer, *args, **kwargs)
            if trainer.global_step % every == 0:  # a saving step
                self.stalls.append(time.perf_counter() - started)

    return Timed


def variants(args, lightning, problems: list[str]) -> dict[str, Callable[[str], float]]:
    """name -> a fit in a new directory, returning its median stall per save in ms (and checking its files)."""
    loader = DataLoader(TensorDataset(torch.randn(8 * args.steps, args.width)), batch_size=8)
    settings = {"save_top_k": 1, "every_n_train_steps": args.every}

    def check(name: str, directory: str, expected: set[str], stalls: list[float]) -> float:
        names = set(os.listdir(directory))
        if not expected <= names:
            problems.append(f"{name}: {directory} holds {sorted(names)}, expected {sorted(expected)}")
        return statistics.median(stalls) * 1e3

    def tracktrain(save_last: bool) -> Callable[[str], float]:
        def fit(directory: str) -> float:
            checkpoint = timed(ModelCheckpoint, args.every)(dirpath=directory, save_last=save_last, **settings)
            Trainer(
                max_steps=args.steps, callbacks=[checkpoint], enable_progress_bar=False, loggers=False,
                default_root_dir=directory, enable_model_summary=False,
            ).fit(Regressor(args.width, args.step_ms / 1e3), loader)  # fmt: skip
            expected = {f"checkpoint_{args.steps}.pt"} | ({f"last_checkpoint_{args.steps}.pt"} if save_last else set())
            return check(f"tracktrain save_last={save_last}", directory, expected, checkpoint.stalls)

        return fit

    found = {
        "tracktrain async, save_top_k=1": tracktrain(False),
        "tracktrain async, save_top_k=1 + save_last=True": tracktrain(True),
    }
    if lightning is not None:
        module = lightning_twin(RegressorCode, lightning)

        def lightning_fit(directory: str) -> float:
            checkpoint = timed(lightning.pytorch.callbacks.ModelCheckpoint, args.every)(
                dirpath=directory, save_last=True, **settings
            )
            saving = {"callbacks": [checkpoint], "enable_checkpointing": True, "default_root_dir": directory}
            lightning_trainer(lightning, max_steps=args.steps, **saving).fit(
                module(args.width, args.step_ms / 1e3), loader
            )
            return check("Lightning", directory, {"last.ckpt"}, checkpoint.stalls)

        found["Lightning, save_top_k=1 + save_last=True"] = lightning_fit
    return found


def main(argv: list[str] | None = None) -> int:
    args = h.parse(
        __doc__,
        argv,
        {
            "repeats": (3, 1, "fits of each variant, interleaved"),
            "steps": (40, 10, "steps of a fit"),
            "every": (5, 5, "steps between saves"),
            "width": (2048, 256, "width of the MLP's layers"),
            "step_ms": (150, 20, "ms each step sleeps, standing for its compute"),
        },
        positive=["repeats", "steps", "every", "width", "step_ms"],
    )
    rng = h.prepare(args)
    lightning, status = load_peer("lightning", "lightning.pytorch.callbacks", skip=args.no_lightning)
    env = h.start(
        "Checkpoint stall with save_last", args, f"{args.repeats} fits per variant, interleaved", lightning=status
    )
    problems: list[str] = []
    fits = variants(args, lightning, problems)
    with tempfile.TemporaryDirectory(prefix="bench-save-last-") as root:
        samples = h.measure(list(fits), args.repeats, rng, lambda name: fits[name](tempfile.mkdtemp(dir=root)), False)
    baseline = "tracktrain async, save_top_k=1"
    rows = h.compare(f"{args.steps} steps, a save every {args.every}", samples, baseline, "ms stall/save", args.stat)
    h.report(rows, decimals=0)
    return h.finish(args, {"environment": env, "arguments": vars(args), "rows": rows}, problems)


if __name__ == "__main__":
    sys.exit(main())
