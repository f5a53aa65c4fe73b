"""`CSVLogger`: the no-dependency logger: metrics as CSV rows and hyperparameters as JSON, on local disk."""

from __future__ import annotations

import csv
import json
import os
import time
from collections.abc import Mapping
from typing import Any

from tracktrain.loggers.base import Logger, flatten_params

__all__ = ["CSVLogger"]


class CSVLogger(Logger):
    """Writes `{save_dir}/{run_id}/metrics.csv` (`step,name,value,timestamp` rows) and `hparams.json`.

    `save_dir` defaults to `{default_root_dir}/logs` (`./.tracktrain/logs` when the root dir is a remote URL: a
    CSV file is appended to, which object stores cannot do); a resumed run appends to its own file. Rows are
    buffered and written at each `flush` (every epoch end), before each checkpoint, and at the end.
    """

    name = "csv"

    def __init__(self, save_dir: str | os.PathLike | None = None) -> None:
        self.save_dir = os.fspath(save_dir) if save_dir is not None else None
        self._run_id: str | None = None
        self._rows: list[tuple[int, str, float, float]] = []
        self.run_dir: str | None = None

    @property
    def run_id(self) -> str | None:
        return self._run_id

    def resume(self, run_id: str) -> None:
        self._run_id = run_id

    def start(self, root_dir: str) -> None:
        from tracktrain import storage  # fsspec: not at `import tracktrain`

        save_dir = self.save_dir or os.path.join(storage.local_dir(root_dir), "logs")
        os.makedirs(save_dir, exist_ok=True)
        if self._run_id is None:
            existing = [name for name in os.listdir(save_dir) if name.startswith("version_")]
            numbers = [int(name.split("_")[1]) for name in existing if name.split("_")[1].isdigit()]
            self._run_id = f"version_{max(numbers, default=-1) + 1}"
        self.run_dir = os.path.join(save_dir, self._run_id)
        os.makedirs(self.run_dir, exist_ok=True)

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        with open(os.path.join(self._require_dir(), "hparams.json"), "w", encoding="utf-8") as out:
            json.dump(flatten_params(params), out, indent=2, default=str)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        now = time.time()
        self._rows.extend((step, name, float(value), now) for name, value in metrics.items())

    def persist(self) -> None:
        """Before a checkpoint commits: the buffered rows go to the file."""
        self.flush()

    def flush(self, timeout: float | None = None) -> bool:
        if not self._rows:
            return True
        path = os.path.join(self._require_dir(), "metrics.csv")
        new_file = not os.path.exists(path)
        with open(path, "a", newline="", encoding="utf-8") as out:
            writer = csv.writer(out)
            if new_file:
                writer.writerow(["step", "name", "value", "timestamp"])
            writer.writerows(self._rows)
        self._rows = []
        return True

    def finalize(self, status: str) -> None:
        if self.run_dir is None:
            return  # it never started (its start failed: that error is the one to see): nothing to end
        self.flush()
        with open(os.path.join(self._require_dir(), "status.txt"), "w", encoding="utf-8") as out:
            out.write(status + "\n")

    def _require_dir(self) -> str:
        if self.run_dir is None:
            raise RuntimeError("CSVLogger is not started: the Trainer starts it when fit begins.")
        return self.run_dir
