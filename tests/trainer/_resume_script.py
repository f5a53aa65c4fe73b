"""Started (and killed) by tests/trainer/test_kill_resume.py: the same command, run again after any kill, resumes.

    python _resume_script.py ROOT_URL OUT_FILE DATA [SEED]

Trains a fit with the Trainer's defaults and `Trainer(resume="auto", default_root_dir=ROOT_URL)`, printing
`step N` after every step and `saving N` when a checkpoint is taken, and writes the final parameters to OUT_FILE.
A 4 MB buffer makes each checkpoint big enough that a kill can land in the middle of its write or upload.

DATA: a number (a shuffling DataLoader with that many workers), "iterable" (an IterableDataset that keeps its own
position), "torchdata" (torchdata's StatefulDataLoader, 2 workers) or "noseed" (no seed given: the Trainer draws
one, printed at the start). SEED: the seed to train with (default 7; "noseed": none).

Started by torchrun it trains with strategy="ddp": rank 0 prints, and each rank writes its parameters (rank r > 0
to OUT_FILE.rank{r}).
"""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, IterableDataset  # noqa: E402

from tests.trainer._tasks import make_loader  # noqa: E402
from tracktrain import Callback, LoopModule, Trainer  # noqa: E402
from tracktrain.callbacks import ModelCheckpoint  # noqa: E402


class Noisy(LoopModule):
    """Dropout and a shuffled loader: the run depends on every generator, so resuming must restore them all."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.3), nn.Linear(16, 2))
        self.register_buffer("ballast", torch.zeros(1024 * 1024))  # 4 MB in every checkpoint

    def train_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=0.01)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 5, 0.9)}


class Stream(IterableDataset):
    """A shuffled stream that keeps its own position, as resumable IterableDatasets do."""

    def __init__(self, dataset) -> None:
        self.dataset, self.passes, self.position = dataset, 0, 0

    def __iter__(self):
        order = torch.randperm(len(self.dataset), generator=torch.Generator().manual_seed(100 + self.passes))
        while self.position < len(order):
            self.position += 1
            yield self.dataset[order[self.position - 1]]
        self.passes, self.position = self.passes + 1, 0

    def state_dict(self):
        return {"passes": self.passes, "position": self.position}

    def load_state_dict(self, state):
        self.passes, self.position = state["passes"], state["position"]


def loader_for(data: str):
    dataset = make_loader(n=96).dataset
    if data == "iterable":
        return DataLoader(Stream(dataset), batch_size=8)
    if data == "torchdata":
        from torchdata.stateful_dataloader import StatefulDataLoader

        return StatefulDataLoader(dataset, batch_size=8, shuffle=True, num_workers=2)
    return DataLoader(dataset, batch_size=8, shuffle=True, num_workers=0 if data == "noseed" else int(data))


RANK = int(os.environ.get("RANK", 0))


def say(line: str) -> None:
    """One line, in one write: the checkpoint writer thread prints too, and print() writes the newline apart."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class Announce(Callback):
    """Rank 0 says where the fit resumed, each step, and each save."""

    def on_fit_start(self, trainer, module):
        if RANK == 0:
            say(f"resumed {trainer.ckpt_path} {trainer.global_step} {trainer.run_seed}")

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if RANK == 0:
            say(f"step {trainer.global_step}")
        time.sleep(0.02)

    def on_save_checkpoint(self, trainer, module, checkpoint):
        if RANK == 0:
            say(f"saving {trainer.global_step}")


def main() -> None:
    root, out, data = sys.argv[1], sys.argv[2], sys.argv[3]
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else (None if data == "noseed" else 7)
    module = Noisy()
    trainer = Trainer(
        max_epochs=4,
        seed=seed,
        resume="auto",
        default_root_dir=root,
        strategy="ddp" if "LOCAL_RANK" in os.environ else "auto",
        loggers=None if "://" not in root else False,  # the CSV logger writes local files only
        enable_progress_bar=False,
        preemption_timeout=30,
        callbacks=[ModelCheckpoint(every_n_train_steps=3, save_top_k=2, save_last=2), Announce()],
    )
    trainer.fit(module, loader_for(data))
    torch.save(
        {name: value for name, value in module.state_dict().items() if name != "ballast"},
        out if RANK == 0 else f"{out}.rank{RANK}",
    )
    if RANK == 0:
        say(f"done {trainer.global_step}")


if __name__ == "__main__":
    main()
