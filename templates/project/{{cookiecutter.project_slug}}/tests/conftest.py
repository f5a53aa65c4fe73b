"""Every test runs in its own temporary directory, with W&B (when used) offline and writing only there, and its
checkpoints in a folder of its own at the project's checkpoint location; commands it starts run with a deadline."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import uuid

import fsspec
import pytest

from {{ cookiecutter.project_slug }}.train import default_config


@pytest.fixture(autouse=True)
def isolated_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [sys.argv[0]])  # the entry points are given their arguments (not pytest's)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)  # tests never upload
    for name in ("WANDB_DIR", "WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home"))
    # a process of the tests' that waits for one that is gone fails within a minute (the default is 30)
    monkeypatch.setenv("TRACKTRAIN_DIST_TIMEOUT", os.environ.get("TRACKTRAIN_DIST_TIMEOUT", "60"))
    return tmp_path


@pytest.fixture
def checkpoint_dir(isolated_run):
    """Where the test's checkpoints go. A local checkpoint.dirpath: `runs/checkpoints` in the test's directory. A URL
    (s3://..., memory://...): a new folder under it, removed afterwards, so the tests prove that the store works
    (its credentials, its fsspec package) and never resume a run of an earlier test."""
    location = default_config()["checkpoint"]["dirpath"]
    if "://" not in location:
        yield "runs/checkpoints"
        return
    url = f"{location.rstrip('/')}/pytest-{uuid.uuid4().hex[:12]}"
    yield url
    filesystem, path = fsspec.core.url_to_fs(url)
    if filesystem.exists(path):
        filesystem.rm(path, recursive=True)


@pytest.fixture
def run_command():
    """Runs a command (list of arguments) in the test's directory and returns it finished, with its output; past
    `timeout` seconds it fails the test, and the command and every process it started (torchrun's) are killed."""

    def run(command: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # its own session: the command and the processes it started
            stdout, stderr = process.communicate()
            pytest.fail(f"{shlex.join(command)} ran for more than {timeout} s:\n{stdout[-3000:]}\n{stderr[-3000:]}")
        return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)

    return run
