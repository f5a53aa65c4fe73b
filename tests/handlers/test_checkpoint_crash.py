"""Checkpoints under real crashes: processes SIGKILLed mid-save and mid-epoch, then resumed as a user would."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tracktrain.handlers import Checkpoint

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SAVE_LOOP = HERE / "_save_loop_script.py"
TRAIN = HERE / "_train_script.py"


_CHILDREN: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _no_orphans():
    """Whatever a test started is dead when it ends, even when an assertion failed before its kill."""
    yield
    while _CHILDREN:
        child = _CHILDREN.pop()
        if child.poll() is None:
            child.kill()  # our own child, by its PID
            child.wait(timeout=30)


def start(*args: str | Path) -> subprocess.Popen:
    child = _popen(*args)
    _CHILDREN.append(child)
    return child


def _popen(*args: str | Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, *map(str, args)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def wait_for_file(process: subprocess.Popen, path: Path, timeout: float = 180.0) -> None:
    """Wait until `path` exists; a glob pattern waits for any match (retention may delete a file quickly)."""
    deadline = time.monotonic() + timeout
    while not (any(path.parent.glob(path.name)) if "*" in path.name else path.exists()):
        if process.poll() is not None:
            raise AssertionError(f"{process.args} exited with {process.returncode}: {process.stderr.read()}")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"{path} did not appear within {timeout} s")
        time.sleep(0.01)


def kill(process: subprocess.Popen) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL


def run_to_completion(*args: str | Path) -> None:
    result = subprocess.run([sys.executable, *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_sigkill_mid_save_never_leaves_a_torn_checkpoint(tmp_path):
    """Kill a process that saves 8 MB checkpoints back to back, at random moments, six times: every `.pt`
    file left behind loads and is complete, and the newest one is what a resume would pick."""
    rng = random.Random(1234)
    for round_ in range(3):
        directories = [tmp_path / f"run{round_}-{i}" for i in range(2)]
        processes = [start(SAVE_LOOP, directory, 8) for directory in directories]  # two at a time: 2 cores
        for process, directory in zip(processes, directories):
            wait_for_file(process, directory / "blob_*.pt")
        time.sleep(rng.uniform(0.0, 0.4))
        for process in processes:
            kill(process)
            time.sleep(rng.uniform(0.0, 0.05))
        for directory in directories:
            names = os.listdir(directory)
            checkpoints = [name for name in names if name.endswith(".pt")]
            # an interrupted write leaves at most its hidden temporary file, which is never taken for a checkpoint
            assert all(name.startswith(".blob_") and name.endswith(".tmp") for name in set(names) - set(checkpoints))
            assert 1 <= len(checkpoints) <= 3, names  # n_saved=2, plus one committed but not yet pruned
            for name in checkpoints:
                state = torch.load(directory / name)
                step = int(name[len("blob_") : -len(".pt")])
                assert state["step"] == step and state["data"].numel() == 8 * 2**18
                assert bool((state["data"] == step).all()), name
            newest = Checkpoint.get_last_checkpoint(directory)
            assert newest == str(directory / max(checkpoints, key=lambda n: int(n[5:-3])))


def _train(directory: Path, out: Path, engine: str, sleep: float = 0.0) -> subprocess.Popen:
    return start(TRAIN, "--dir", directory, "--out", out, "--engine", engine, "--sleep", sleep)


def _kill_mid_epoch_and_resume(tmp_path: Path, engine: str) -> dict:
    directory, out = tmp_path / "checkpoints", tmp_path / "out"
    crashing = _train(directory, out, engine, sleep=0.15)
    wait_for_file(crashing, directory / "checkpoint_6.pt")  # iteration 6 of 8-iteration epochs
    kill(crashing)
    assert not (out / "final.pt").exists()
    run_to_completion(TRAIN, "--dir", directory, "--out", out, "--engine", engine)
    return json.loads((out / "report.json").read_text())


@pytest.mark.slow
def test_deterministic_engine_resumes_after_sigkill_bit_identically(tmp_path):
    """The resume story: killed mid-epoch, restarted, the run ends with exactly the parameters of a run that
    was never interrupted (same data order, same dropout masks, same optimizer and scheduler state)."""
    baseline = _train(tmp_path / "baseline", tmp_path / "baseline-out", "deterministic")  # alongside
    report = _kill_mid_epoch_and_resume(tmp_path, "deterministic")
    assert baseline.wait(timeout=120) == 0, baseline.stderr.read()

    resumed_from = report["resumed_from"]
    assert resumed_from >= 6 and resumed_from % 3 == 0 and resumed_from % 8 != 0  # mid-epoch
    assert report["iterations"] == list(range(resumed_from + 1, 33))
    assert report["final_iteration"] == 32 and report["final_epoch"] == 4
    expected = torch.load(tmp_path / "baseline-out" / "final.pt")
    resumed = torch.load(tmp_path / "out" / "final.pt")
    assert expected.keys() == resumed.keys()
    for name in expected:
        assert torch.equal(resumed[name], expected[name]), name


@pytest.mark.slow
def test_plain_engine_resumes_from_the_checkpoint_iteration_as_ignite_documents(tmp_path):
    """A plain Engine continues from the saved iteration and finishes the cut-short epoch with the right number
    of iterations; its data iterator restarts, so the batches (and the final parameters) may differ."""
    report = _kill_mid_epoch_and_resume(tmp_path, "plain")
    resumed_from = report["resumed_from"]
    assert resumed_from >= 6 and resumed_from % 8 != 0
    assert report["iterations"] == list(range(resumed_from + 1, 33))
    assert report["epochs_ended_at"] == [end for end in (8, 16, 24, 32) if end > resumed_from]
    assert report["final_iteration"] == 32 and report["final_epoch"] == 4
