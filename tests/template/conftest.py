"""Generate projects from the repository's cookiecutter template the way a user does: the `cookiecutter` command
in a subprocess, answers given on the command line, tracktrain from this checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import _processes

REPOSITORY = Path(__file__).resolve().parents[2]
TEMPLATE = "templates/project"

pytest.importorskip("cookiecutter")


def cookiecutter(output_dir: Path, *arguments: str, **answers: str) -> subprocess.CompletedProcess:
    """`cookiecutter REPOSITORY --no-input -o OUTPUT_DIR ARGUMENTS... KEY=VALUE...`, not checked."""
    answers = {"tracktrain_requirement": f"tracktrain @ {REPOSITORY.as_uri()}", **answers}
    command = [
        sys.executable,
        "-m",
        "cookiecutter",
        str(REPOSITORY),
        "--no-input",
        "-o",
        str(output_dir),
        *arguments,
        *(f"{key}={value}" for key, value in answers.items()),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def project_environment(project: Path, **extra: str) -> dict[str, str]:
    """This interpreter (tracktrain installed in it) with the generated package importable, as an install would
    make it, without the minutes an install takes; W&B offline with every folder it writes under the project."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("WANDB_", "MLFLOW_"))}
    environment.update(
        PYTHONPATH=str(project),
        WANDB_MODE="offline",
        WANDB_SILENT="true",
        HOME=str(project / ".home"),
        WANDB_BASE_URL="http://127.0.0.1:9",
        **extra,
    )
    for name in ("WANDB_DIR", "WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR"):
        environment[name] = str(project / "wandb-home")
    return environment


def run_project_tests(project: Path, *arguments: str, timeout: float = 400) -> _processes.Command:
    """The generated project's own `pytest` (with `arguments`, e.g. `-k NAME`), in `project_environment`, waited for
    (`.returncode`, `.stdout`, `.stderr`); past `timeout` seconds it fails with the stack of every process it left
    (torchrun's ranks included)."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *arguments]
    return _processes.run(command, timeout=timeout, cwd=project, env=project_environment(project))


@pytest.fixture
def generate(tmp_path: Path) -> Callable[..., Path]:
    """Generates a project (through the root index, --directory when `directory=True`) and returns its folder."""

    def generate_project(directory: bool = False, **answers: str) -> Path:
        arguments = ("--directory", TEMPLATE) if directory else ()
        before = set(tmp_path.iterdir())
        result = cookiecutter(tmp_path, *arguments, **answers)
        assert result.returncode == 0, result.stdout + result.stderr
        (project,) = [path for path in set(tmp_path.iterdir()) - before if path.is_dir()]
        return project

    return generate_project


@pytest.fixture(autouse=True)
def own_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """cookiecutter keeps replay files (and reads a user config) under HOME: a fresh one per test."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("COOKIECUTTER_CONFIG", raising=False)
    return home
