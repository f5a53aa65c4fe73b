"""The generated project's DDP choice, launched as its README says: `torchrun --standalone --nproc_per_node 2 -m
<slug>.train` (2 gloo processes on this CPU). One MLflow run for the job, checkpoints written by rank 0 only, and
the same command again resumes both ranks from the newest checkpoint into the same run."""

from __future__ import annotations

import glob
import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests import _processes
from tests.template.conftest import project_environment

mlflow_tracking = pytest.importorskip("mlflow.tracking")

STEPS_PER_EPOCH = 23  # 1437 training images, 2 ranks, batches of 32 per rank: ceil(719 / 32)


EPOCHS = 8  # of the kill-and-resume test: the kill lands in an early epoch, far from the end


def torchrun_command(epochs: int, *settings: str) -> list[str]:
    """The README's command with these dotted options (`--trainer.max_epochs=N`, ...)."""
    return _processes.torchrun(
        "-m",
        "digits_classifier.train",
        f"--trainer.max_epochs={epochs}",
        "--data.batch_size=32",
        "--trainer.enable_progress_bar=false",
        *settings,
    )


def torchrun(project: Path, epochs: int, *settings: str, timeout: float = 150) -> _processes.Command:
    """The README's command, waited for (`.returncode`, `.stdout`, `.stderr`); past `timeout` seconds it fails with
    every rank's stack."""
    environment = project_environment(project, OMP_NUM_THREADS="1")
    return _processes.run(torchrun_command(epochs, *settings), timeout=timeout, cwd=project, env=environment)


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


@pytest.mark.slow
@pytest.mark.distributed
def test_the_ddp_project_stops_early_together_and_a_sigterm_to_one_rank_stops_both(generate):
    """Validation and a checkpoint every epoch, early stopping on a val_accuracy each rank computes on its own shard
    (the ranks' values differ, so one asks first), and a SIGTERM sent to rank 1 alone: both ranks always stop at
    the same step and the same command resumes them. Every collective is bounded (60 s), so a hang fails."""
    project = generate(tracker="mlflow", strategy="ddp")
    # an EarlyStopping callback added to the config's, as LightningCLI appends to a list
    patience = (
        "--trainer.callbacks+=EarlyStopping",
        "--trainer.callbacks.monitor=val_accuracy",
        "--trainer.callbacks.mode=max",
        "--trainer.callbacks.patience=1",
    )

    # SIGTERM to rank 1 only, once rank 0 has reported its first epoch
    environment = project_environment(project, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    with _processes.Command(torchrun_command(12, *patience), cwd=project, env=environment, merge_stderr=True) as run:
        assert run.wait_for(lambda line: "] - Epoch 1/" in line, timeout=300), run.tails()
        ranks = run.ranks()  # the training processes torchrun started, by their RANK
        assert set(ranks) == {0, 1}, run.tails()
        os.kill(ranks[1], signal.SIGTERM)
        run.wait(timeout=120)
    output = run.stdout
    stopped = re.findall(r"Stopped by SIGTERM after step (\d+); (\S+) holds it", output)
    assert stopped, output[-3000:]
    step = int(stopped[0][0])
    assert STEPS_PER_EPOCH <= step < STEPS_PER_EPOCH * 12, output[-3000:]
    assert run.returncode != 0 and "final metrics" not in output
    assert stopped[0][1].endswith(f"last_checkpoint_{step}.pt")

    # the same command resumes both ranks and runs until early stopping stops both at the same epoch
    again = torchrun(project, 12, *patience, timeout=400)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    output = again.stdout + again.stderr
    assert "resumed from" in output and f"last_checkpoint_{step}.pt" in output
    final = [int(steps) for steps in re.findall(r"final metrics after (\d+) steps", again.stdout)]
    assert len(final) == 1, output[-3000:]  # once, from rank 0
    assert final[0] % STEPS_PER_EPOCH == 0 and final[0] < 12 * STEPS_PER_EPOCH, output[-3000:]  # early, at an epoch end

    client = mlflow_tracking.MlflowClient(f"sqlite:///{project / 'runs' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("digits_classifier")
    (run_info,) = client.search_runs([experiment.experiment_id])  # the pre-empted run continued, not a new one
    assert run_info.info.status == "FINISHED"


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_a_project_killed_mid_run_resumes_to_the_weights_of_an_uninterrupted_run(generate, strategy):
    """The template's torchrun strategies: the README's command, SIGKILLed (launcher and both ranks at once, as a
    node failure) in its second epoch, then the same command again, ends with the weights of a run that was never
    interrupted — bit for bit, dropout included."""
    torch = pytest.importorskip("torch")
    project = generate(tracker="mlflow", strategy=strategy)
    full = torchrun(project, EPOCHS, "--trainer.default_root_dir=full", "--checkpoint.dirpath=full/checkpoints")
    assert full.returncode == 0, full.stdout[-3000:] + full.stderr[-3000:]

    environment = project_environment(project, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    with _processes.Command(torchrun_command(EPOCHS), cwd=project, env=environment, merge_stderr=True) as run:
        assert run.wait_for(lambda line: "] - Epoch 1/" in line, timeout=300), run.tails()
        # killed once the first checkpoint is committed (not after a fixed time: an epoch of 23 steps now takes less
        # than the 1.5 s this test used to wait, and the run ended before the kill)
        deadline = time.monotonic() + 60
        while not glob.glob(str(project / "runs" / "checkpoints" / "*.manifest.json")):
            assert time.monotonic() < deadline, run.tails()
            time.sleep(0.02)
        run.kill()
        run.wait(timeout=60)
    assert run.returncode != 0 and "final metrics" not in run.stdout

    again = torchrun(project, EPOCHS)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "resumed from" in again.stdout
    from tracktrain.checkpoint.state import read_checkpoint

    # fsdp's are sharded (each rank's shards in a directory), read whole here
    final = f"last_checkpoint_{EPOCHS * STEPS_PER_EPOCH}.{'dcp' if strategy == 'fsdp' else 'pt'}"
    expected = read_checkpoint(project / "full" / "checkpoints" / final)["model"]
    resumed = read_checkpoint(project / "runs" / "checkpoints" / final)["model"]
    assert expected.keys() == resumed.keys()
    assert all(torch.equal(expected[name], resumed[name]) for name in expected)
