"""Bad answers stop generation with what was wrong, the value and the fix, and leave no half-made project."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.template.conftest import REPOSITORY, cookiecutter


def failed(result: subprocess.CompletedProcess, output_dir: Path) -> str:
    assert result.returncode != 0, result.stdout + result.stderr
    assert not [path for path in output_dir.iterdir() if path.is_dir()]  # nothing left behind
    return result.stdout + result.stderr


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        (
            {"project_slug": "My-Model"},
            "project_slug 'My-Model' is not a Python package name: use lowercase letters, "
            "digits and underscores, starting with a letter (e.g. project_slug='my_model')",
        ),
        ({"project_slug": "2fast"}, "project_slug '2fast' is not a Python package name"),
        (
            {"project_slug": "torch"},
            "project_slug 'torch' would shadow a Python keyword or a package the project imports",
        ),
        (
            {"checkpoint_location": "s4://bucket/ckpt"},
            "checkpoint_location 's4://bucket/ckpt' uses the protocol 's4', which fsspec does not know",
        ),
        ({"checkpoint_location": " runs"}, "checkpoint_location ' runs' must be a directory path or an fsspec URL"),
        (
            {"checkpoint_location": "memory://ckpt", "strategy": "fsdp"},
            "checkpoint_location 'memory://ckpt' lives in one process's memory, which the processes of strategy "
            "'fsdp' do not share: use a local path or an object store URL",
        ),
        ({"tracktrain_requirement": ""}, "tracktrain_requirement '' must be one pip requirement"),
    ],
)
def test_a_bad_answer_is_refused_by_the_hook(tmp_path, answers, message):
    output = failed(cookiecutter(tmp_path, **answers), tmp_path)

    assert f"ERROR: {message}" in output


def test_an_unknown_tracker_on_the_command_line_is_refused_with_the_choices(tmp_path):
    output = failed(cookiecutter(tmp_path, tracker="tensorboard"), tmp_path)

    # cookiecutter checks a choice given on the command line before any hook runs
    assert (
        "tensorboard provided for choice variable tracker, but the choices are ['mlflow', 'wandb', 'both', 'none']"
        in output
    )


def test_an_unknown_tracker_that_bypasses_the_prompts_is_refused_by_the_hook(tmp_path, own_home):
    """A replay file (or an edited one) skips cookiecutter's own choice check; the hook still catches it."""
    assert cookiecutter(tmp_path / "first", tracker="none").returncode == 0
    replay = json.loads((own_home / ".cookiecutter_replay" / "project.json").read_text())
    replay["cookiecutter"]["tracker"] = "tensorboard"
    replay_file = tmp_path / "replay.json"
    replay_file.write_text(json.dumps(replay))
    (tmp_path / "second").mkdir()

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cookiecutter",
            str(REPOSITORY),
            "--directory",
            "templates/project",
            "--replay-file",
            str(replay_file),
            "-o",
            str(tmp_path / "second"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )

    output = failed(result, tmp_path / "second")
    assert (
        "ERROR: tracker 'tensorboard' is not one of ['mlflow', 'wandb', 'both', 'none']; pass e.g. "
        "tracker='mlflow'." in output
    )


@pytest.fixture
def lock(tmp_path):
    """Makes a directory unwritable, also for root (who may write anywhere, so it gets the immutable attribute),
    and writable again at the end."""
    locked: list[Path] = []

    def lock_dir(path: Path) -> None:
        if os.geteuid() == 0:
            if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
                pytest.skip("running as root, and chattr +i (the only lock root cannot pass) does not work here")
        else:
            path.chmod(0o555)
        locked.append(path)

    yield lock_dir
    for path in locked:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        path.chmod(stat.S_IRWXU)


def test_an_unwritable_output_dir_is_refused_with_its_path(tmp_path, lock):
    output_dir = tmp_path / "locked"
    output_dir.mkdir()
    lock(output_dir)

    result = cookiecutter(output_dir)

    assert result.returncode != 0
    # cookiecutter makes the project directory before any hook can run, and names it
    assert f"Unable to create directory at {output_dir}/digits_classifier" in result.stdout + result.stderr
    assert not list(output_dir.iterdir())


def test_regenerating_into_an_unwritable_project_dir_is_refused_by_the_hook(tmp_path, lock):
    project = tmp_path / "digits_classifier"
    project.mkdir()
    lock(project)

    result = cookiecutter(tmp_path, "--overwrite-if-exists")

    assert result.returncode != 0
    error = "Operation not permitted" if os.geteuid() == 0 else "Permission denied"
    assert (
        f"ERROR: cannot write into the output directory '{project}' ({error}); pass a writable one with --output-dir."
    ) in result.stdout + result.stderr
