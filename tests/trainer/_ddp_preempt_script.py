"""Started by torchrun in tests/trainer/test_ddp_preemption.py: a resumable 2-rank fit that reports, per rank,
where it stopped (a pre-emption signal) or finished.

    torchrun --nproc_per_node 2 _ddp_preempt_script.py ROOT
"""

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.trainer._tasks import Classifier, make_loader  # noqa: E402
from tracktrain import Callback, Trainer  # noqa: E402
from tracktrain.callbacks import ModelCheckpoint  # noqa: E402

root = Path(sys.argv[1])
rank = int(os.environ["RANK"])


class Report(Callback):
    def on_fit_start(self, trainer, module):
        self._write("started", trainer)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        print(f"rank {rank} pid {os.getpid()} step {trainer.global_step}", flush=True)
        time.sleep(0.05)

    def on_exception(self, trainer, module, exception):
        self._write(type(exception).__name__, trainer)

    def on_fit_end(self, trainer, module):
        weights = [p.detach().flatten().tolist() for p in module.parameters()]
        self._write("finished", trainer, weights=weights)

    def _write(self, what, trainer, **extra):
        record = {"what": what, "step": trainer.global_step, "ckpt_path": trainer.ckpt_path, **extra}
        with open(root / f"rank{rank}.jsonl", "a") as out:
            out.write(json.dumps(record) + "\n")


trainer = Trainer(
    max_epochs=3,
    strategy="ddp",
    seed=3,
    resume="auto",
    default_root_dir=root,
    enable_progress_bar=False,
    loggers=False,
    callbacks=[ModelCheckpoint(every_n_train_steps=100, save_last=True), Report()],
)
trainer.fit(Classifier(), make_loader(n=128, shuffle=True))
