"""The generated project's DDP choice, launched as its README says: `torchrun --standalone --nproc_per_node 2 -m
<slug>.train` (2 gloo processes on this CPU). One MLflow run for the job, checkpoints written by rank 0 only, and
the same command again resumes both ranks from the newest checkpoint into the same run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integrations.conftest import free_port
from tests.template.conftest import project_environment

mlflow_tracking = pytest.importorskip("mlflow.tracking")

STEPS_PER_EPOCH = 23  # 1437 training images, 2 ranks, batches of 32 per rank: ceil(719 / 32)


def torchrun(project: Path, epochs: int, timeout: float = 150) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
               "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
               "-m", "digits_classifier.train", "--epochs", str(epochs),
               "--set", "data.batch_size=32", "--set", 'trainer.progress_bar="never"']
    environment = project_environment(project, OMP_NUM_THREADS="1")
    return subprocess.run(command, cwd=project, env=environment, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.distributed
def test_the_ddp_project_trains_under_torchrun_and_resumes_into_one_run(generate):
    project = generate(tracker="mlflow", strategy="ddp")
    first = torchrun(project, epochs=1)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert first.stdout.count(f"final metrics after {STEPS_PER_EPOCH} steps") == 1  # rank 0 reports, once

    checkpoints = project / "runs" / "checkpoints"
    names = sorted(os.listdir(checkpoints))
    assert f"last_checkpoint_{STEPS_PER_EPOCH}.pt.manifest.json" in names
    assert not [name for name in names if name.endswith(".tmp")]

    again = torchrun(project, epochs=2)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert again.stdout.count(f"final metrics after {2 * STEPS_PER_EPOCH} steps") == 1
    assert "resumed from" in again.stdout and f"last_checkpoint_{STEPS_PER_EPOCH}.pt" in again.stdout

    client = mlflow_tracking.MlflowClient(f"sqlite:///{project / 'runs' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("digits_classifier")
    (run,) = client.search_runs([experiment.experiment_id])  # one run for the job: not one per rank, not per start
    assert run.info.status == "FINISHED"
    validation = sorted(metric.step for metric in client.get_metric_history(run.info.run_id, "val_accuracy"))
    assert validation == [STEPS_PER_EPOCH, 2 * STEPS_PER_EPOCH]  # once per epoch, from rank 0, across the resume
    assert run.data.params["trainer/strategy"] == "ddp"

    # the README's command for longer than a test usually runs: 8 more epochs, each validated and checkpointed on a
    # val_accuracy each rank logs without sync_dist (the ranks' values differ: the save decision must not). Past
    # epoch 4 this hung before the decision was rank 0's on every rank.
    longer = torchrun(project, epochs=10, timeout=400)  # ~60 s when all is well
    assert longer.returncode == 0, longer.stdout[-3000:] + longer.stderr[-3000:]
    assert longer.stdout.count(f"final metrics after {10 * STEPS_PER_EPOCH} steps") == 1
    (run,) = client.search_runs([experiment.experiment_id])
    validation = sorted(metric.step for metric in client.get_metric_history(run.info.run_id, "val_accuracy"))
    assert validation == [epoch * STEPS_PER_EPOCH for epoch in range(1, 11)]
    assert run.info.status == "FINISHED"
