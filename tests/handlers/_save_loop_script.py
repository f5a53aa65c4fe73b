"""Saves large checkpoints in a loop until killed: `python _save_loop_script.py DIRECTORY MEGABYTES`.

Each checkpoint holds a tensor filled with the iteration it was saved at, so a reader can tell a complete
file from a torn one. Used by test_checkpoint_crash.py, which SIGKILLs this process at random moments.
"""

from __future__ import annotations

import sys

import torch

from tracktrain.engine import Engine, Events
from tracktrain.handlers import Checkpoint, DiskSaver


class Blob:
    """A state that changes every iteration and is big enough that writing it takes a while."""

    def __init__(self, engine: Engine, megabytes: int) -> None:
        self.engine = engine
        self.numel = megabytes * 2**20 // 4

    def state_dict(self) -> dict:
        step = self.engine.state.iteration
        return {"step": step, "data": torch.full((self.numel,), float(step))}

    def load_state_dict(self, state_dict: dict) -> None:
        pass


def main() -> None:
    directory, megabytes = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(1)
    engine = Engine(lambda e, b: None)
    checkpoint = Checkpoint({"blob": Blob(engine, megabytes)}, DiskSaver(directory, require_empty=False), n_saved=2)
    engine.add_event_handler(Events.ITERATION_COMPLETED, checkpoint)
    engine.run(None, max_epochs=1, epoch_length=10**6)


if __name__ == "__main__":
    main()
