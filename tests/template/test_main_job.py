"""The README's first set-up command, `scripts/main-job.sh`, as a new user runs it (2 epochs instead of 5)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_main_job_generates_trains_and_says_how_to_open_the_run(tmp_path):
    environment = {**os.environ, "EPOCHS": "2"}
    result = subprocess.run(["bash", str(REPOSITORY / "scripts" / "main-job.sh"), str(tmp_path)], env=environment,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    database = tmp_path / "digits_classifier" / "runs" / "mlflow.db"
    assert f"mlflow ui --backend-store-uri sqlite:///{database}" in result.stdout
    accuracy = float(re.search(r"final metrics after 46 steps: .*val_accuracy (\S+)", result.stdout).group(1))
    assert accuracy > 0.6  # 2 epochs of an MLP on digits
    assert database.is_file()
    assert "100%" in result.stdout + result.stderr  # the progress bar was drawn

    # the same command again: the run is finished, nothing is trained, the MLflow run is left as it was
    tracking = pytest.importorskip("mlflow.tracking")
    client = tracking.MlflowClient(f"sqlite:///{database}")
    (run,) = client.search_runs(client.get_experiment_by_name("digits_classifier").experiment_id)
    again = subprocess.run(["bash", str(REPOSITORY / "scripts" / "main-job.sh"), str(tmp_path)], env=environment,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Run already finished at epoch 2, step 46" in again.stderr and "raise max_epochs (now 2)" in again.stderr
    assert "final metrics" not in again.stdout and "Epoch 1/" not in again.stdout + again.stderr
    (unchanged,) = client.search_runs(run.info.experiment_id)
    assert unchanged.info.end_time == run.info.end_time and unchanged.data.metrics == run.data.metrics

    # a raised limit continues the same run, its steps and epochs going on from where they were
    longer = subprocess.run(["bash", str(REPOSITORY / "scripts" / "main-job.sh"), str(tmp_path)],
                            env={**environment, "EPOCHS": "3"}, capture_output=True, text=True, timeout=600)
    assert longer.returncode == 0, longer.stderr[-3000:]
    assert "final metrics after 69 steps" in longer.stdout
    (continued,) = client.search_runs(run.info.experiment_id)
    assert continued.info.run_id == run.info.run_id
    epochs = [metric.value for metric in client.get_metric_history(run.info.run_id, "epoch")]
    assert epochs == sorted(epochs) and epochs[-1] == 2.0
