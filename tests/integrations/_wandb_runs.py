"""Reading an offline W&B run back with W&B's own reader (`wandb leet inspect --json`): shared by the WandbLogger
tests and the template's W&B test."""

from __future__ import annotations

import json
import subprocess
import sys


def _inspect(run_dir, *flags) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", *flags, str(run_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout


def read_run(run_dir) -> dict:
    """What W&B recorded for one offline run: its run record, history rows (metrics only), artifacts, the files it
    uploads at sync, summary."""
    records = [json.loads(line) for line in _inspect(run_dir).splitlines()]
    runs = [record["run"] for record in records if record["type"] == "run"]
    history = []
    for record in records:
        if record["type"] == "history":
            item = record["history"]["item"]
            history.append({key: value for key, value in item.items() if not key.startswith("_") or key == "_step"})
    return {
        "run": runs[-1],  # W&B rewrites the run record when tags change
        "runs": runs,
        "history": history,
        "artifacts": [record["artifact"] for record in records if record["type"] == "artifact"],
        "files": [file["path"] for record in records if record["type"] == "files" for file in record["files"]["files"]],
        "exit_code": next(record["exit"].get("exit_code", 0) for record in records if record["type"] == "exit"),
        "state": json.loads(_inspect(run_dir, "--summary")),
    }
