"""Started (and killed) by tests/trainer/test_kill_resume.py: the same command, run again after any kill, resumes.

    python _resume_script.py ROOT_URL OUT_FILE NUM_WORKERS

Trains a deterministic fit with `Trainer(resume="auto", default_root_dir=ROOT_URL)`, printing `step N` after
every step and `saving N` when a checkpoint is taken, and writes the final parameters to OUT_FILE. A 4 MB buffer
makes each checkpoint big enough that a kill can land in the middle of its write or upload.
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

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


class Announce(Callback):
    def on_fit_start(self, trainer, module):
        print(f"resumed {trainer.ckpt_path} {trainer.global_step}", flush=True)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        print(f"step {trainer.global_step}", flush=True)
        time.sleep(0.02)

    def on_save_checkpoint(self, trainer, module, checkpoint):
        print(f"saving {trainer.global_step}", flush=True)


def main() -> None:
    root, out, num_workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
    module = Noisy()
    trainer = Trainer(
        max_epochs=4, seed=7, deterministic=True, resume="auto", default_root_dir=root,
        loggers=None if "://" not in root else False,  # the CSV logger writes local files only
        enable_progress_bar=False, preemption_timeout=30,
        callbacks=[ModelCheckpoint(every_n_train_steps=3, save_top_k=2, save_last=2), Announce()],
    )
    trainer.fit(module, make_loader(n=96, shuffle=True) if num_workers == 0 else torch.utils.data.DataLoader(
        make_loader(n=96).dataset, batch_size=8, shuffle=True, num_workers=num_workers))
    torch.save({name: value for name, value in module.state_dict().items() if name != "ballast"}, out)
    print(f"done {trainer.global_step}", flush=True)


if __name__ == "__main__":
    main()
