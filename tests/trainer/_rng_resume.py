"""Helpers of tests/trainer/test_resume_rng.py: a module whose training draws from every global generator (torch's
dropout, python's `random`, numpy's), a different amount on each rank, over a shuffling DataLoader with a worker; the
fits the test runs; and, run as a script, a fit that stops for good after step HOLD_AT, to be killed there with
SIGKILL:

    python tests/trainer/_rng_resume.py ROOT RANKS

It prints `holding` (rank 0) when it waits to be killed. RANKS > 1: that many gloo processes (started by
tracktrain.distributed.spawn inside the script) train with strategy="ddp".

Every fit uses the Trainer's defaults (no `deterministic=True`) but for the seed (so that the uninterrupted run
shuffles as the killed one did) and the progress bar.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from tests.trainer._tasks import make_loader  # noqa: E402
from tracktrain import Callback, LoopModule, Trainer  # noqa: E402
from tracktrain.callbacks import ModelCheckpoint  # noqa: E402

try:
    import numpy
except ImportError:  # numpy is optional for tracktrain: its generator is then left out
    numpy = None

SEED = 5
EPOCHS = 3
BATCHES = 8  # per epoch and rank: 64 samples, 8 per batch on one process, 4 per batch and rank on 2
SAVE_EVERY = 5  # a checkpoint at steps 5, 10, 15, 20: step 10 is batch 2 of epoch 1, mid-epoch
HOLD_AT = 12  # the killed run waits here, 2 steps after the checkpoint it resumes from
STEPS = EPOCHS * BATCHES


def rank() -> int:
    return int(os.environ.get("RANK", 0))


class Noisy(LoopModule):
    """Dropout, and a random scale of the input drawn from torch, python and numpy; rank r draws r + 1 numbers from
    each (as a rank-dependent augmentation would), so the ranks' generators are in different states at a save.
    `draws`: what each step drew, by the step's number."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 2))
        self.draws: dict[int, list[list[float]]] = {}

    def train_step(self, batch, batch_idx):
        x, y = batch
        count = rank() + 1
        draws = [torch.rand(count).tolist(), [random.random() for _ in range(count)]]
        if numpy is not None:
            draws.append(numpy.random.rand(count).tolist())
        self.draws[self.global_step + 1] = draws
        scale = 1.0 + 0.1 * sum(values[-1] for values in draws)
        return F.cross_entropy(self.net(x * scale), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


class HoldForTheKill(Callback):
    """After step HOLD_AT: say so (rank 0) and wait, to be killed mid-epoch."""

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == HOLD_AT:
            if rank() == 0:
                sys.stdout.write("holding\n")
                sys.stdout.flush()
            time.sleep(600)


def fit(root: str, ranks: int, extra_callbacks: tuple = ()) -> tuple[Noisy, Trainer]:
    """The command run, killed, and run again: resumes from the newest checkpoint in `root`, if any."""
    module = Noisy()
    trainer = Trainer(
        max_epochs=EPOCHS,
        seed=SEED,
        resume="auto",
        default_root_dir=root,
        enable_progress_bar=False,
        strategy="ddp" if ranks > 1 else "auto",
        callbacks=[ModelCheckpoint(every_n_train_steps=SAVE_EVERY), *extra_callbacks],
    )
    # loaded by a worker process: with num_workers=0 the Trainer reseeds this process's generators before each
    # batch (tracktrain.engine.deterministic), and the model's draws then follow from the batch alone. The worker
    # forked, as in a rank torchrun starts (in a rank that spawn started, the default start method is spawn's, which
    # starts a worker in 3 s, every pass)
    data = DataLoader(
        make_loader(n=64).dataset, batch_size=8 // ranks, shuffle=True, num_workers=1, multiprocessing_context="fork"
    )
    trainer.fit(module, data)
    return module, trainer


def killed_fit(root: str, ranks: int) -> None:
    fit(root, ranks, (HoldForTheKill(),))


def resume_then_uninterrupted(root: str, reference_root: str, out: str, ranks: int) -> None:
    """Resume the killed run in `root`, then train the same run uninterrupted in `reference_root`; save each one's
    parameters, draws, and where it started from in `out` (one file per run and rank)."""
    for name, directory in (("resumed", root), ("uninterrupted", reference_root)):
        module, trainer = fit(directory, ranks)
        result = {
            "params": module.state_dict(),
            "draws": module.draws,
            "ckpt_path": trainer.ckpt_path,
            "global_step": trainer.global_step,
        }
        torch.save(result, Path(out, f"{name}_rank{rank()}.pt"))


def main() -> None:
    root, ranks = sys.argv[1], int(sys.argv[2])
    if ranks == 1:
        killed_fit(root, ranks)
    else:
        from tests.trainer import _rng_resume  # by its importable name: the ranks unpickle the function from it
        from tracktrain.distributed.collectives import spawn

        spawn(_rng_resume.killed_fit, ranks, args=(root, ranks))


if __name__ == "__main__":
    main()
