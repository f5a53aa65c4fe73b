"""The README's main job and the examples, run as a new user runs them (shortened)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EPOCH_LINE = r"epoch\s+(\d+)/5\s+train_loss ([\d.]+)\s+val_loss ([\d.]+)\s+val_accuracy ([\d.]+)"


def _run(script: str, *args: str, cwd: Path) -> str:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), "--epochs", "5", *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )
    return result.stdout


def _check_learning(stdout: str) -> None:
    epochs = re.findall(EPOCH_LINE, stdout)
    assert [int(e[0]) for e in epochs] == [1, 2, 3, 4, 5], stdout
    train_losses = [float(e[1]) for e in epochs]
    assert train_losses[-1] < train_losses[0]
    assert float(epochs[-1][3]) > 0.9, stdout  # an MLP reaches ~97% on digits


def test_main_job_trains_a_loop_module_and_keeps_the_best_checkpoint(tmp_path):
    stdout = _run("digits_mlp.py", "--root-dir", str(tmp_path / "run"), cwd=tmp_path)
    _check_learning(stdout)
    best = re.search(r"best checkpoint (\S+)", stdout).group(1)
    assert Path(best).is_file() and "val_accuracy=" in best
    assert list((tmp_path / "run" / "checkpoints").glob("last_checkpoint_*.pt.manifest.json"))


def test_engine_example_trains(tmp_path):
    _check_learning(_run("digits_engine.py", cwd=tmp_path))


def _torchrun(script: str, *args: str, cwd: Path) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
        + [str(ROOT / "examples" / script), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.slow  # two processes through torchrun; CI runs the slow tests
@pytest.mark.distributed
@pytest.mark.parametrize("schedule", ["1f1b", "interleaved_1f1b"])
def test_pipeline_example_trains_through_torchrun(tmp_path, schedule):
    """The README's command for the pipeline example: two stages (four, interleaved) on two ranks learn the digits."""
    stdout = _torchrun("digits_pipeline.py", "--epochs", "5", "--schedule", schedule, cwd=tmp_path)
    _check_learning(stdout)  # printed once, by the rank holding the last stage


@pytest.mark.slow  # two processes through torchrun, twice; CI runs the slow tests
@pytest.mark.distributed
def test_pipeline_trainer_example_learns_and_the_same_command_resumes(tmp_path):
    """The README's command for the Trainer's pipeline: two stages on two ranks learn the digits, save checkpoints by
    stage, and the same command with more epochs goes on from the last one."""
    _check_learning(_torchrun("digits_pipeline_trainer.py", "--epochs", "5", cwd=tmp_path))
    again = _torchrun("digits_pipeline_trainer.py", "--epochs", "7", cwd=tmp_path)
    assert [int(epoch) for epoch in re.findall(r"epoch\s+(\d+)/7", again)] == [6, 7]  # went on after epoch 5
    best = re.search(r"best checkpoint (\S+)", again).group(1)
    assert "val_accuracy=" in best and (tmp_path / best).is_dir()  # a sharded checkpoint: a directory of shards
