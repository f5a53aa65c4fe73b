"""Train with checkpoints that grow each epoch under a file-size limit (RLIMIT_FSIZE) that the third one exceeds: a
write that really runs out of room. Prints the error the fit raised, as `ERROR <type>: <message>`."""

from __future__ import annotations

import resource
import signal
import sys

import torch

from tests.trainer._tasks import Classifier, make_loader
from tracktrain import Callback, Trainer
from tracktrain.callbacks import ModelCheckpoint

LIMIT = 700_000  # bytes a file may have: the checkpoint of epoch 1 (0.43 MB) fits, that of epoch 2 (0.83 MB) does not


class GrowingState(Callback):
    """State of 400 kB more per epoch."""

    def __init__(self) -> None:
        self.epochs = 0

    def on_train_epoch_end(self, trainer, module) -> None:
        self.epochs += 1

    def state_dict(self):
        return {"history": torch.zeros(self.epochs * 100_000)}


def main(root: str, async_save: bool) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as a full disk does
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))
    checkpoint = ModelCheckpoint(dirpath=f"{root}/checkpoints", save_top_k=None, async_save=async_save)
    trainer = Trainer(
        max_epochs=4,
        enable_progress_bar=False,
        default_root_dir=root,
        loggers=False,
        callbacks=[GrowingState(), checkpoint],
    )
    try:
        trainer.fit(Classifier(), make_loader())
    except Exception as error:  # noqa: BLE001 - the test reads it
        print(f"ERROR {type(error).__name__}: {error}", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] == "async")
