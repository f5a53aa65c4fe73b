"""Every value of every template choice generates a project whose own `pytest` passes and whose code lints clean.

Each project runs its own tests as a user runs them after the install, in this checkout's environment (the project
importable through PYTHONPATH, as its editable install makes it: no environment per project). Five projects cover
each value of `tracker`, `precision`, `strategy` and the checkpoint location (a local path, `memory://`, `s3://` on
moto's server); the default run generates the cheap one, the slow run the rest. Under `ddp` and `fsdp` the project's
tests start 2 gloo processes with torchrun, resume them, and train once without torchrun (a world of one).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests import _processes
from tests.template.conftest import project_environment, run_project_tests

# (tracker, precision, strategy, checkpoint location); every value of each appears at least once
CHOICES = [
    # the default run's: no tracker and one process keep it quick (~15 s), with three choices off their default
    pytest.param("none", "bf16-mixed", "single_device", "memory", id="none-bf16-single_device-memory"),
    pytest.param("mlflow", "32-true", "single_device", "local", id="defaults", marks=pytest.mark.slow),
    pytest.param("wandb", "16-mixed", "single_device", "s3", id="wandb-16-single_device-s3", marks=pytest.mark.slow),
    pytest.param("mlflow", "bf16-mixed", "ddp", "local", id="mlflow-bf16-ddp-local", marks=pytest.mark.slow),
    pytest.param("both", "16-mixed", "fsdp", "s3", id="both-16-fsdp-s3", marks=pytest.mark.slow),
]


def checkpoint_location(kind: str, request: pytest.FixtureRequest) -> str:
    if kind == "local":
        return "runs/checkpoints"
    if kind == "memory":
        return "memory://digits/checkpoints"
    return f"{request.getfixturevalue('s3_bucket')}/checkpoints"  # moto's server, reached through AWS_* variables


@pytest.mark.parametrize(("tracker", "precision", "strategy", "location"), CHOICES)
def test_each_choice_generates_a_project_whose_own_tests_pass(
    generate, request, tracker, precision, strategy, location
):
    project = generate(
        project_slug="digits",
        tracker=tracker,
        precision=precision,
        strategy=strategy,
        checkpoint_location=checkpoint_location(location, request),
    )

    result = run_project_tests(project)

    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    # the fit with its checkpoints and tracker record, the resume (both on 2 processes under ddp/fsdp, plus a world
    # of one without torchrun), the learning-rate finder, the config
    assert "4 passed" in result.stdout and "skipped" not in result.stdout, result.stdout[-3000:]
    lint = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "E,F,W", "--line-length", "120", "."],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert lint.returncode == 0, lint.stdout[-3000:]  # no import or name left over from another choice's branch
    dependencies = tomllib.loads((project / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(dependency.startswith("tracktrain @ file://") for dependency in dependencies)
    assert any(dependency.startswith("mlflow") for dependency in dependencies) == (tracker in ("mlflow", "both"))
    assert any(dependency.startswith("wandb") for dependency in dependencies) == (tracker in ("wandb", "both"))
    assert any(dependency.startswith("s3fs") for dependency in dependencies) == (location == "s3")


def test_a_ddp_project_started_without_torchrun_trains_as_one_process(generate):
    """The default run's guard of the torchrun strategies, whose whole projects run in the slow run: the project's
    own test of `python -m <slug>.train` without torchrun (a world of one process, and the line about torchrun)."""
    project = generate(project_slug="digits", tracker="none", strategy="ddp")

    result = run_project_tests(project, "-k", "without_torchrun")

    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    assert "1 passed, 3 deselected" in result.stdout, result.stdout[-3000:]


def readme_commands(project: Path, section: str) -> list[str]:
    """The commands of the first bash block under `## {section}` in the project's README, as printed."""
    text = (project / "README.md").read_text().split(f"## {section}", 1)[1]
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["single_device", "fsdp"])
def test_the_readme_train_commands_work_as_printed(generate, strategy):
    """The README's first train command and its torchrun command, pasted as they are (all 10 epochs), each into a
    fresh run directory: `python` and `torchrun` are this environment's, found on PATH as in an activated venv."""
    project = generate(project_slug="digits", tracker="none", strategy=strategy)
    environment = project_environment(project, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    (train, *_others) = readme_commands(project, "Train")
    (launch,) = readme_commands(project, "Several processes")
    assert train.startswith("python -m digits.train ") and launch.startswith("torchrun --standalone")

    for command, processes in ((train, 1), (launch, 2)):
        shutil.rmtree(project / "runs", ignore_errors=True)
        result = _processes.run(["bash", "-c", command], timeout=300, cwd=project, env=environment)

        assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
        steps = 10 * -(-1437 // (64 * processes))  # 10 epochs of the training images in batches of 64 per process
        assert result.stdout.count(f"final metrics after {steps} steps") == 1, result.stdout[-3000:]
        alone = "on 1 process, as torchrun did not start it" in result.stdout
        assert alone == (processes == 1 and strategy != "single_device")
