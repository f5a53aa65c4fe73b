"""The `tracktrain` command as users type it (the console script the install puts beside the interpreter): runs,
inspect and ui, on a real run with checkpoints and an MLflow store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer._tasks import Classifier, make_loader
from tracktrain import Trainer
from tracktrain_integrations.testing import experiment_names, free_port

pytest.importorskip("mlflow")
from tracktrain_integrations.mlflow import MLflowLogger  # noqa: E402

TRACKTRAIN = str(Path(sys.executable).with_name("tracktrain"))


def tracktrain(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([TRACKTRAIN, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


class Hparams(Classifier):
    def __init__(self) -> None:
        super().__init__(lr=0.1)
        self.hparams = {"lr": 0.1, "width": 4}


@pytest.fixture(scope="module")
def run_root(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("cli")
    root = folder / "runs"
    trainer = Trainer(
        max_epochs=2,
        enable_progress_bar=False,
        default_root_dir=root,
        seed=3,
        loggers=[MLflowLogger(experiment_name="cli-test")],
    )
    trainer.fit(Hparams(), make_loader(), make_loader(n=16))
    return root


def test_runs_lists_checkpoints_writer_and_tracker_runs(run_root):
    result = tracktrain("runs", "runs", cwd=run_root.parent)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "checkpoints in runs/checkpoints:"
    assert lines[1].split()[:3] == ["checkpoint_16.pt", "step", "16"]
    assert 'resume="auto" continues from checkpoint_16.pt' in result.stdout
    assert "writer: no run is writing here" in result.stdout
    assert "cli-test / cli-test-" in result.stdout and "FINISHED  last step 16" in result.stdout


def test_inspect_says_what_a_checkpoint_holds_and_that_it_is_complete(run_root):
    result = tracktrain("inspect", str(run_root / "checkpoints" / "checkpoint_16.pt"), cwd=run_root)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("manifest: valid (checkpoint_16.pt ")
    assert "content: matches its manifest" in result.stdout
    assert "step 16, iteration 16, epoch length 8" in result.stdout
    assert "module: Hparams" in result.stdout and "hyperparameters: lr=0.1, width=4" in result.stdout
    assert "seed=3" in result.stdout
    assert "  model: 2 tensors, 10 values, 40 bytes" in result.stdout


def test_runs_and_inspect_tell_weights_only_checkpoints_apart(tmp_path, capsys, monkeypatch):
    """ModelCheckpoint(save_weights_only=True)'s files: listed as weights only, never offered as the resume point
    (a fit there starts a new run), and inspect says what they are for. (In this process: the console script itself
    is the other tests'.)"""
    from tracktrain.callbacks import ModelCheckpoint
    from tracktrain_integrations.cli import main

    root = tmp_path / "runs"
    weights = ModelCheckpoint(dirpath=root / "checkpoints", save_weights_only=True, async_save=False)
    Trainer(max_epochs=1, enable_progress_bar=False, logger=False, default_root_dir=root, callbacks=[weights]).fit(
        Classifier(), make_loader()
    )

    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["runs", "runs"]) == 0
    listing = capsys.readouterr().out
    assert listing.splitlines()[1].endswith("weights only")
    assert "none complete (weights only: they load with load_from_checkpoint" in listing
    assert 'resume="auto" continues' not in listing
    assert main(["inspect", str(root / "checkpoints" / "checkpoint_8.pt")]) == 0
    assert "weights only (ModelCheckpoint(save_weights_only=True)), step 8" in capsys.readouterr().out


def test_inspect_refuses_a_damaged_checkpoint_and_names_a_missing_one(run_root, tmp_path):
    damaged = tmp_path / "checkpoint_16.pt"
    data = bytearray((run_root / "checkpoints" / "checkpoint_16.pt").read_bytes())
    data[-100] ^= 0xFF
    damaged.write_bytes(bytes(data))
    (tmp_path / "checkpoint_16.pt.manifest.json").write_bytes(
        (run_root / "checkpoints" / "checkpoint_16.pt.manifest.json").read_bytes()
    )
    result = tracktrain("inspect", str(damaged), cwd=tmp_path)
    assert result.returncode == 2 and "SHA-256" in result.stderr, result.stdout + result.stderr

    missing = tracktrain("inspect", "runs/checkpoints/checkpoint_99.pt", cwd=run_root.parent)
    assert missing.returncode == 2
    assert missing.stderr.strip() == (
        "tracktrain inspect: No checkpoint at runs/checkpoints/checkpoint_99.pt. "
        "`tracktrain runs ROOT` lists the checkpoints of the run under ROOT."
    )


@pytest.mark.slow  # starts the MLflow UI (~13 s); CI's slow run keeps it
def test_ui_serves_the_runs_own_mlflow_store(run_root):
    port = free_port()
    server = subprocess.Popen(
        [TRACKTRAIN, "ui", "runs", "--port", str(port)],
        cwd=run_root.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert server.stdout.readline().startswith(f"MLflow UI of runs: http://127.0.0.1:{port}")
        names = experiment_names(port, 90, lambda: server.poll() is None)
        assert names is not None and "cli-test" in names
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)  # by its PID: the UI and its workers
            server.wait(timeout=30)


def test_ui_without_a_tracker_store_says_what_to_do(tmp_path):
    (tmp_path / "runs").mkdir()
    result = tracktrain("ui", "runs", cwd=tmp_path)
    assert (
        result.returncode == 2 and "No tracker store under" in result.stderr and "tracktrain runs runs" in result.stderr
    )
