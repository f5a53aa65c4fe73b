"""`FileTracker`: a `QueuedLogger` whose tracker is a JSON-lines file, for the delivery tests (tests/test_loggers.py)
and the scripts they start; a module of its own so that a sender child and a script can import it by name."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tracktrain.loggers import QueuedLogger
from tracktrain.loggers.delivery import Record


class FileTracker(QueuedLogger):
    """A QueuedLogger whose 'tracker' is a JSON-lines file, one line per record naming the process that wrote it. It
    is down while `<target>.down` exists and, while `<target>.slow` exists, waits that many seconds in every send
    (after touching `<target>.sending`); a sender child rebuilding it waits while `<target>.gate` exists (a child slow
    to start): switches that reach a sender child, which has its own environment."""

    name = "file"

    def __init__(self, target: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.target = target

    def _open(self, root_dir: str) -> str:
        return "run-1"

    def _send(self, records: list[Record]) -> None:
        if os.path.exists(self.target + ".down"):
            raise ConnectionError("down")
        if os.path.exists(self.target + ".slow"):
            Path(self.target + ".sending").touch()
            time.sleep(float(Path(self.target + ".slow").read_text()))
        with open(self.target, "a") as out:
            for record in records:
                out.write(json.dumps({"pid": os.getpid(), "step": record.step, **record.payload}) + "\n")

    def _close(self, status: str) -> None:
        if not os.path.exists(self.target + ".down"):
            Path(self.target).with_suffix(".status").write_text(status)

    def _spill_header(self) -> dict:
        return {**super()._spill_header(), "target": self.target}

    @classmethod
    def for_replay(cls, header) -> FileTracker:
        while os.path.exists(header["target"] + ".gate"):
            time.sleep(0.01)
        logger = cls(header["target"])
        logger.resume(header["run_id"])
        return logger
