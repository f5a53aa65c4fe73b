"""Where `bench_logging.py`'s fits log to, and the read-back after the timing: the trackers' locations in one run
(a shared sqlite file, a local mlflow server, W&B's folders), what each fit's logger delivered where, and the check
that every metric arrived at every step of every run (MlflowClient, the CSV file, W&B's `wandb leet inspect`)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from tracktrain_integrations.testing import MlflowServer

METRIC_NAMES = ("loss", "accuracy", "logit_mean", "logit_std", "logit_max")
WANDB_FOLDERS = ("WANDB_DIR", "WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR")


@dataclass
class Delivery:
    """Where a fit's logged values went, to be read back after the timing: `kind` is "csv" (location: the
    metrics.csv file), "mlflow" (location: the tracking URI) or "wandb" (location: the offline run's folder)."""

    kind: str
    location: str
    run_id: str | None = None
    undelivered: int = 0  # records the logger says it could not deliver (tracktrain's loggers)


@dataclass
class Trackers:
    """Where the trackers live in this run: the sqlite URI every MLflow variant on the embedded file shares, the
    server (when a variant needs it), W&B's folders."""

    root_dir: str
    sqlite_uri: str
    server: MlflowServer | None = None

    @property
    def server_uri(self) -> str:
        if self.server is None:
            raise RuntimeError("no mlflow server was started")
        return self.server.url


def quiet_trackers(root_dir: str) -> None:
    """Set before the trackers are imported. W&B: offline and silent, every folder it writes (data, cache, config)
    under `root_dir`, and a base URL where nothing listens, so that no traffic leaves the machine. MLflow: warnings
    only (not its database creation and migration), and no "View run at" links printed when a run on the server
    ends (which also spares set_terminated one get_run, at the end of the fit, outside the timing)."""
    for variable in WANDB_FOLDERS:
        folder = os.path.join(root_dir, variable.lower())
        os.makedirs(folder, exist_ok=True)
        os.environ[variable] = folder
    os.environ.pop("WANDB_API_KEY", None)
    os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_BASE_URL="http://127.0.0.1:9")
    os.environ.update(MLFLOW_LOGGING_LEVEL="WARNING", MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT="true")


def tracktrain_delivery(logger: Any) -> Delivery | None:
    if logger is None:
        return None
    undelivered = getattr(logger, "undelivered", 0)
    if logger.tracker == "csv":
        return Delivery("csv", os.path.join(logger.log_dir, "metrics.csv"), logger.run_id)
    if logger.tracker == "mlflow":
        return Delivery("mlflow", logger.tracking_uri, logger.run_id, undelivered)
    if logger.tracker == "wandb":
        return Delivery("wandb", logger.run_dir, logger.run_id, undelivered)
    raise ValueError(f"no read-back for logger {logger.name!r}")


def read_back(delivery: Delivery) -> tuple[dict[str, set[int]], str]:
    """The steps at which each metric arrived in the tracker, and the run's final state as the tracker has it."""
    if delivery.kind == "csv":
        steps: dict[str, set[int]] = {}
        with open(delivery.location, newline="", encoding="utf-8") as rows:
            for row in csv.DictReader(rows):  # a row per logged step, a column per metric (Lightning's layout)
                for name, value in row.items():
                    if name != "step" and value != "":
                        steps.setdefault(name, set()).add(int(row["step"]))
        with open(os.path.join(os.path.dirname(delivery.location), "status.txt"), encoding="utf-8") as status:
            return steps, status.read().strip()
    if delivery.kind == "mlflow":
        from mlflow.tracking import MlflowClient

        client = MlflowClient(delivery.location)
        steps = {}
        for name in METRIC_NAMES:
            history = client.get_metric_history(delivery.run_id, name)
            steps[name] = {metric.step for metric in history}
            if len(history) != len(steps[name]):
                steps[name].add(-len(history))  # repeats at one step: the count check below sees them
        return steps, client.get_run(delivery.run_id).info.status
    if delivery.kind == "wandb":
        # W&B's own reader of the offline run's transaction log, as tests/integrations/test_wandb.py reads it
        result = subprocess.run(
            [sys.executable, "-m", "wandb", "leet", "inspect", "--json", delivery.location],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        records = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
        steps = {}
        for record in records:
            if record["type"] == "history":
                item = record["history"]["item"]
                for name in METRIC_NAMES:
                    if name in item:
                        steps.setdefault(name, set()).add(int(item["_step"]))
        exits = [record["exit"].get("exit_code", 0) for record in records if record["type"] == "exit"]
        return steps, "FINISHED" if exits == [0] else f"exit records {exits}"
    raise ValueError(f"unknown delivery kind {delivery.kind!r}")


def verify_deliveries(
    deliveries_by_variant: dict[str, list[Delivery]], steps_per_fit: int, problems: list[str]
) -> dict[str, dict[str, Any]]:
    """Per variant with a logger: how many of its runs hold every metric at every one of the `steps_per_fit` steps,
    closed as FINISHED. Each miss is a problem (that is what makes the script exit 1)."""
    verified: dict[str, dict[str, Any]] = {}
    for key, deliveries in deliveries_by_variant.items():
        complete = 0
        for index, delivery in enumerate(deliveries):
            where = f"{key} run {delivery.run_id} (fit {index + 1} of {len(deliveries)})"
            try:
                steps, status = read_back(delivery)
            except Exception as error:  # a run that cannot be read back is as bad as one that is missing values
                problems.append(f"{where}: could not be read back: {type(error).__name__}: {error}")
                continue
            counts = {name: len(steps.get(name, ())) for name in METRIC_NAMES}
            distinct = {len(values) for values in steps.values()}
            missing = {name: count for name, count in counts.items() if count != steps_per_fit}
            if missing or distinct != {steps_per_fit}:
                problems.append(
                    f"{where}: expected each of {list(METRIC_NAMES)} at {steps_per_fit} distinct steps, found {counts}"
                )
            elif status != "FINISHED":
                problems.append(f"{where}: the run ended as {status!r}, not FINISHED")
            else:
                complete += 1
        verified[key] = {"runs": len(deliveries), "complete_runs": complete, "values_per_metric": steps_per_fit}
    return verified
