"""A run that logs through a real sender child (`delivery="process"`), for tests/test_delivery_persist.py to kill.

`HeldTracker` is a `QueuedLogger` whose "tracker" is a JSON-lines file (one line per delivered record, naming the
process that wrote it). While `<target>.hold` exists, a send touches `<target>.sending` and waits there: the batch
stays in flight in the sender child. (Switches are files: they reach the sender child, a process of its own.)

    python -c "from tests._delivery_run import main; main()" first ROOT TARGET
        logs step 1, waits until the sender child holds it in flight, logs steps 2 and 3, calls `persist()` (what the
        Trainer does before a checkpoint commits), prints `persisted <sender child pid> <spill file>` and waits to
        be killed.
    python -c "from tests._delivery_run import main; main()" restart ROOT TARGET
        the same run started again (as a run resumed from that checkpoint would): resumes run "run-1", logs nothing
        new, finalizes and prints `finished <records left undelivered>`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from tracktrain.loggers.base import QueuedLogger
from tracktrain.loggers.delivery import Record

RUN_ID = "run-1"


class HeldTracker(QueuedLogger):
    name = "held"

    def __init__(self, target: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.target = target

    def _open(self, root_dir: str) -> str:
        return RUN_ID

    def _send(self, records: list[Record]) -> None:
        if os.path.exists(self.target + ".hold"):
            Path(self.target + ".sending").touch()
            while os.path.exists(self.target + ".hold"):
                time.sleep(0.01)
        with open(self.target, "a") as out:
            for record in records:
                out.write(json.dumps({"pid": os.getpid(), "kind": record.kind, "step": record.step}) + "\n")

    def _close(self, status: str) -> None:
        Path(self.target).with_suffix(".status").write_text(status)

    def _spill_header(self) -> dict:
        return {**super()._spill_header(), "target": self.target}

    @classmethod
    def for_replay(cls, header) -> HeldTracker:
        logger = cls(header["target"])
        logger.resume(header["run_id"])
        return logger


def _wait_for(path: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout} s")
        time.sleep(0.01)


def main() -> None:
    mode, root, target = sys.argv[1:4]
    logger = HeldTracker(target, delivery="process", linger=0.0)
    logger.sender_keep_warm = 0.0  # ended at finalize: nothing of this run outlives it
    if mode == "first":
        logger.start(root)
        logger.log_metrics({"loss": 1.0}, 1)
        _wait_for(target + ".sending")  # step 1 is in the sender child's hands, held there
        logger.log_metrics({"loss": 0.5}, 2)
        logger.log_metrics({"loss": 0.25}, 3)
        logger.persist()
        print(f"persisted {logger.sender_pid} {logger.spill_path}", flush=True)
        time.sleep(600)  # training goes on, until the test kills this process
    elif mode == "restart":
        logger.resume(RUN_ID)
        logger.start(root)
        logger.finalize("FINISHED")
        print(f"finished {logger.undelivered}", flush=True)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
