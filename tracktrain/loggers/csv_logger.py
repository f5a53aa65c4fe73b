"""`CSVLogger`: the no-dependency logger, Lightning's layout: `{save_dir}/{name}/version_{N}/metrics.csv` (one row per
logged step, a column per metric, `step` and `epoch` among them) and `hparams.yaml`, on local disk."""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping
from typing import Any

from tracktrain.loggers.base import Logger, flatten_params
from tracktrain.loggers.versioned import VersionedFolders, write_status, write_yaml

__all__ = ["CSVLogger"]

METRICS_FILE = "metrics.csv"
HPARAMS_FILE = "hparams.yaml"


class CSVLogger(VersionedFolders, Logger):  # type: ignore[override]  # save_dir: a property here, an attribute in Logger
    """Lightning's `CSVLogger`, with its arguments and files: each `log_metrics` call is a row of `metrics.csv` (its
    `step`, and the metrics logged then; a metric new to the file adds a column, the file rewritten with it), read
    back as Lightning users do (`pandas.read_csv(f"{trainer.logger.log_dir}/metrics.csv")`); the hyperparameters in
    `hparams.yaml`; and, ours, the run's end status in `status.txt`.

    Args:
        save_dir: the directory of the logs; default: the Trainer's `default_root_dir` (`./.tracktrain` when that is
            a remote URL: a CSV file is appended to, which object stores cannot do).
        name: the experiment's folder under `save_dir` ("lightning_logs"; "" or None: none).
        version: the run's folder: `version_{N}` for an int, the string itself for a str; default: the next free
            `version_{N}`. A resumed fit continues its own version (its id is saved in checkpoints) and appends to
            its file.
        prefix: put before every metric's name, with "-" (Lightning's).
        flush_logs_every_n_steps: rows are buffered and written every that many steps, at each epoch's end, before
            each checkpoint commits and at the end.
    """

    tracker = "csv"
    LOGGER_JOIN_CHAR = "-"

    def __init__(
        self,
        save_dir: str | os.PathLike | None = None,
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        prefix: str = "",
        flush_logs_every_n_steps: int = 100,
    ) -> None:
        if version is not None and (isinstance(version, bool) or not isinstance(version, (int, str))):
            raise TypeError(
                f"CSVLogger(version=...) is an int (version_N), a str (the folder) or None, got {version!r}."
            )
        if isinstance(flush_logs_every_n_steps, bool) or not isinstance(flush_logs_every_n_steps, int):
            raise TypeError(f"CSVLogger(flush_logs_every_n_steps=...) is an int, got {flush_logs_every_n_steps!r}.")
        if flush_logs_every_n_steps < 1:
            raise ValueError(f"CSVLogger(flush_logs_every_n_steps=...) is at least 1, got {flush_logs_every_n_steps}.")
        self._set_folders(save_dir, name, version)
        self.prefix = prefix
        self.flush_logs_every_n_steps = flush_logs_every_n_steps
        self._run_id: str | None = None
        self._rows: list[dict[str, Any]] = []
        self._columns: list[str] = []  # the header of the file as written
        self._experiment = _CSVExperiment(self)

    # ------------------------------------------------------------------------------------- Lightning's surface
    @property
    def log_dir(self) -> str | None:  # type: ignore[override]
        """The run's folder, `{save_dir}/{name}/version_{N}` (None until known: a fit starts it)."""
        if self.root_dir is None or self._run_id is None:
            return None
        return os.path.join(self.root_dir, self._run_id)

    @property
    def experiment(self) -> _CSVExperiment:
        """Lightning's experiment writer of the run: `log_metrics(metrics, step)`, `log_hparams(params)`, `save()`,
        `metrics_file_path`, `log_dir`."""
        return self._experiment

    # ------------------------------------------------------------------------------------------ the protocol
    @property
    def run_id(self) -> str | None:
        return self._run_id

    def resume(self, run_id: str) -> None:
        self._run_id = run_id

    def start(self, root_dir: str) -> None:
        if self._run_id is not None and self._version is None:  # a resumed run: its own version (in checkpoints)
            taken = self._run_id.removeprefix("version_")
            self._version = int(taken) if taken.isdigit() else self._run_id
        self._run_id = self._version_folder(root_dir)
        log_dir = self.log_dir
        assert log_dir is not None
        os.makedirs(log_dir, exist_ok=True)
        self._columns = _header(os.path.join(log_dir, METRICS_FILE))

    def log_hyperparams(self, params: Any, metrics: Any = None) -> None:
        """Write the hyperparameters to `hparams.yaml` (a dict, or an object with `vars()`: an argparse
        Namespace). `metrics`: Lightning's TensorBoard argument, logged as a row here."""
        if not isinstance(params, Mapping):
            params = vars(params)
        write_yaml(os.path.join(self._require_dir(), HPARAMS_FILE), flatten_params(params))
        if metrics:
            self.log_metrics(metrics, 0)

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        row = {_prefixed(self.prefix, name): _plain(value) for name, value in metrics.items()}
        row["step"] = step if step is not None else len(self._rows)
        self._rows.append(row)
        if (row["step"] + 1) % self.flush_logs_every_n_steps == 0:
            self.flush()

    def persist(self) -> None:
        """Before a checkpoint commits: the buffered rows go to the file."""
        self.flush()

    def save(self) -> None:
        """Lightning's: write the buffered rows."""
        self.flush()

    def flush(self, timeout: float | None = None) -> bool:
        if not self._rows:
            return True
        path = os.path.join(self._require_dir(), METRICS_FILE)
        new = sorted({name for row in self._rows for name in row} - set(self._columns))
        if new and self._columns and os.path.exists(path):  # a new metric: the file rewritten with its column
            with open(path, newline="", encoding="utf-8") as existing:
                old = list(csv.DictReader(existing))
            self._columns = sorted({*self._columns, *new})
            self._write(path, old + self._rows, "w")
        else:
            self._columns = sorted({*self._columns, *new})
            self._write(path, self._rows, "a" if os.path.exists(path) else "w")
        self._rows = []
        return True

    def finalize(self, status: str) -> None:
        if self.log_dir is None:
            return  # it never started (its start failed: that error is the one to see): nothing to end
        self.flush()
        write_status(self.log_dir, status)

    def _write(self, path: str, rows: list[dict[str, Any]], mode: str) -> None:
        with open(path, mode, newline="", encoding="utf-8") as out:
            writer = csv.DictWriter(out, fieldnames=self._columns)
            if mode == "w":
                writer.writeheader()
            writer.writerows(rows)

    def _require_dir(self) -> str:
        if self.log_dir is None:
            raise RuntimeError("CSVLogger is not started: the Trainer starts it when fit begins.")
        return self.log_dir


class _CSVExperiment:
    """What Lightning's `CSVLogger.experiment` is (its `_ExperimentWriter`), over the logger's own file."""

    def __init__(self, logger: CSVLogger) -> None:
        self._logger = logger

    @property
    def log_dir(self) -> str:
        return self._logger._require_dir()

    @property
    def metrics_file_path(self) -> str:
        return os.path.join(self.log_dir, METRICS_FILE)

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """The rows logged and not written yet."""
        return self._logger._rows

    def log_metrics(self, metrics_dict: Mapping[str, Any], step: int | None = None) -> None:
        self._logger.log_metrics(metrics_dict, step)

    def log_hparams(self, params: Mapping[str, Any]) -> None:
        self._logger.log_hyperparams(params)

    def save(self) -> None:
        self._logger.flush()


def _header(path: str) -> list[str]:
    """The columns of an existing metrics file (a resumed run appends to it), none for a new one."""
    if not os.path.exists(path):
        return []
    with open(path, newline="", encoding="utf-8") as existing:
        return next(csv.reader(existing), [])


def _prefixed(prefix: str, name: str) -> str:
    return f"{prefix}{CSVLogger.LOGGER_JOIN_CHAR}{name}" if prefix else name


def _plain(value: Any) -> Any:
    """A tensor's number (`.item()`: read when written, as Lightning does), anything else as it is."""
    item = getattr(value, "item", None)
    return item() if callable(item) and getattr(value, "numel", lambda: 0)() == 1 else value
