"""Deliver the records a logger could not deliver during a run (its spill file) once the tracker is back.

    python -m tracktrain.loggers.replay runs/exp1/mlflow-<run id>.undelivered.jsonl

The file's header names the logger class and the run; the records go to that run with the tracker's batch API,
then the run is ended with the status the training ended with. The file is removed once everything is delivered.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from tracktrain.loggers.delivery import read_spill

__all__ = ["replay"]


def replay(path: str | os.PathLike, batch_size: int = 500) -> int:
    """Send every record of the spill file at `path` to its run; returns how many were sent."""
    header, records = read_spill(path)
    module_name, _, class_name = header["logger"].rpartition(".")
    logger_class = getattr(importlib.import_module(module_name), class_name)
    logger = logger_class.for_replay(header)
    statuses = [record.payload["status"] for record in records if record.kind == "status"]
    records = [record for record in records if record.kind != "status"]
    for start in range(0, len(records), batch_size):
        logger._send(records[start : start + batch_size])
    if statuses:
        logger._close(statuses[-1])  # the run ends as the training did, now that the tracker has it all
    os.remove(path)
    return len(records)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spill_files", nargs="+", help="*.undelivered.jsonl files a run left behind")
    args = parser.parse_args(argv)
    for path in args.spill_files:
        count = replay(path)
        print(f"{path}: {count} records delivered")
    return 0


if __name__ == "__main__":
    sys.exit(main())
