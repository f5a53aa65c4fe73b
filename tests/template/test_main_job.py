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
    result = subprocess.run(
        ["bash", str(REPOSITORY / "scripts" / "main-job.sh"), str(tmp_path)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    database = tmp_path / "digits_classifier" / "runs" / "mlflow.db"
    assert f"mlflow ui --backend-store-uri sqlite:///{database}" in result.stdout
    accuracy = float(re.search(r"final metrics after 46 steps: .*val_accuracy (\S+)", result.stdout).group(1))
    assert accuracy > 0.6  # 2 epochs of an MLP on digits
    best = re.search(r"best checkpoint \(val_accuracy\): (\S+)", result.stdout).group(1)
    assert Path(best).is_file() and Path(best).parent == tmp_path / "digits_classifier" / "runs" / "checkpoints"
    assert database.is_file()
    assert "\r" not in result.stdout + result.stderr  # output to a log: no bar frames (plain lines instead)
    assert_the_printed_mlflow_command_works_when_pasted(result.stdout)

    # the same command again: the run is finished, nothing is trained, the MLflow run is left as it was
    tracking = pytest.importorskip("mlflow.tracking")
    client = tracking.MlflowClient(f"sqlite:///{database}")
    (run,) = client.search_runs(client.get_experiment_by_name("digits_classifier").experiment_id)
    again = subprocess.run(
        ["bash", str(REPOSITORY / "scripts" / "main-job.sh"), str(tmp_path)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Run already finished at epoch 2, step 46" in again.stderr and "raise max_epochs (now 2)" in again.stderr
    assert "final metrics" not in again.stdout and "Epoch 1/" not in again.stdout + again.stderr
    (unchanged,) = client.search_runs(run.info.experiment_id)
    assert unchanged.info.end_time == run.info.end_time and unchanged.data.metrics == run.data.metrics

    # a raised limit continues the same run, its steps and epochs going on from where they were
    longer = subprocess.run(
        ["bash", str(REPOSITORY / "scripts" / "main-job.sh"), str(tmp_path)],
        env={**environment, "EPOCHS": "3"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert longer.returncode == 0, longer.stderr[-3000:]
    assert "final metrics after 69 steps" in longer.stdout
    (continued,) = client.search_runs(run.info.experiment_id)
    assert continued.info.run_id == run.info.run_id
    epochs = [metric.value for metric in client.get_metric_history(run.info.run_id, "epoch")]
    assert epochs == sorted(epochs) and epochs[-1] == 2.0


def assert_the_printed_mlflow_command_works_when_pasted(output: str) -> None:
    """The main job's last line, pasted as it is in another directory, with a PATH that does not hold the virtual
    environment (a new terminal), and a port of the test's: the MLflow UI answers and lists the run's experiment."""
    import shlex
    import signal

    from tracktrain_integrations.testing import experiment_names, free_port

    command = re.search(r"open the run in the MLflow UI: (.*?)  \(then http", output).group(1)
    port = free_port()
    environment = {**os.environ, "PATH": "/usr/bin:/bin"}
    server = subprocess.Popen(
        [*shlex.split(command), "--host", "127.0.0.1", "--port", str(port)],
        cwd="/",
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        names = experiment_names(port, 90, lambda: server.poll() is None)
        assert names is not None, server.stderr.read().decode()[-3000:] if server.poll() is not None else "no answer"
        assert "digits_classifier" in names
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)  # its process group, by its PID: the UI's workers go with it
            server.wait(timeout=30)
