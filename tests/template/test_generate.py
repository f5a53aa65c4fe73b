"""Both ways of naming the template work, the answers reach the project, and its entry points and trackers do what
they say. (Each choice's own `pytest`: test_choices.py.)"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tomllib

import pytest
import yaml

from tests.integrations._wandb_runs import read_run
from tests.template.conftest import project_environment


def test_the_root_index_and_the_template_directory_generate_the_same_project(generate, tmp_path):
    through_index = generate()
    by_directory = generate(directory=True, project_slug="by_directory")

    assert through_index.name == "digits_classifier"  # the default name, slugged
    files = sorted(
        p.relative_to(through_index).as_posix().replace("digits_classifier", "SLUG")
        for p in through_index.rglob("*")
        if p.is_file()
    )
    assert files == sorted(
        p.relative_to(by_directory).as_posix().replace("by_directory", "SLUG")
        for p in by_directory.rglob("*")
        if p.is_file()
    )
    assert {
        "pyproject.toml",
        "README.md",
        "SLUG/config.yaml",
        "SLUG/module.py",
        "SLUG/data.py",
        "SLUG/train.py",
        "tests/test_smoke.py",
    } <= set(files)


def test_the_answers_reach_the_config_and_the_readme(generate):
    project = generate(
        project_name="Fraud Model",
        tracker="both",
        precision="bf16-mixed",
        strategy="ddp",
        checkpoint_location="s3://fraud-bucket/checkpoints",
    )

    config = yaml.safe_load((project / "fraud_model" / "config.yaml").read_text())
    assert config["trainer"]["precision"] == "bf16-mixed" and config["trainer"]["strategy"] == "ddp"
    assert config["checkpoint"]["dirpath"] == "s3://fraud-bucket/checkpoints"
    loggers = {logger["class_path"]: logger["init_args"] for logger in config["trainer"]["loggers"]}
    assert loggers["tracktrain_integrations.mlflow.MLflowLogger"]["experiment_name"] == "fraud_model"
    assert loggers["tracktrain_integrations.wandb.WandbLogger"]["project"] == "fraud_model"
    readme = (project / "README.md").read_text()
    for needed in (
        "python -m fraud_model.train",
        "torchrun --standalone --nproc_per_node 2 -m fraud_model.train",
        "trains as a world of one process",  # without torchrun, and why
        "mlflow ui --backend-store-uri sqlite:///",
        "wandb sync",
        "--trainer.resume null",
        "tracktrain @ file://",
    ):
        assert needed in readme
    scripts = tomllib.loads((project / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"fraud-model-train": "fraud_model.train:main"}


def test_the_entry_point_rejects_a_bad_option_naming_it_and_the_close_ones(generate):
    project = generate(tracker="none")
    config = yaml.safe_load((project / "digits_classifier" / "config.yaml").read_text())
    assert config["trainer"]["loggers"] == [{"class_path": "tracktrain.loggers.CSVLogger"}]  # none: a CSV log

    result = subprocess.run(
        [sys.executable, "-m", "digits_classifier.train", "--trainer.epochs", "3"],
        cwd=project,
        env=project_environment(project),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 2
    assert "unrecognized arguments: --trainer.epochs 3. Did you mean trainer." in result.stderr
    assert "trainer.max_epochs?" in result.stderr


@pytest.mark.slow
def test_the_wandb_choice_writes_an_offline_run_whose_history_holds_the_metrics(generate):
    project = generate(tracker="wandb", project_slug="digits_wandb_run")
    result = subprocess.run(
        [sys.executable, "-m", "digits_wandb_run.train", "--trainer.max_epochs", "2"],
        cwd=project,
        env=project_environment(project),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    steps = int(result.stdout.split("final metrics after ")[1].split()[0])
    assert "wandb sync" in result.stdout
    run_dirs = sorted(project.glob("**/offline-run-*"))
    assert len(run_dirs) == 1, run_dirs  # one run for the job
    history = read_run(run_dirs[0])["history"]
    validated = [row["_step"] for row in history if "val_accuracy" in row]
    assert validated == [steps // 2, steps]  # each epoch's validation, at the global step it ended on
    assert 0.0 < history[-1]["val_accuracy"] <= 1.0
    train_steps = [row["_step"] for row in history if "train_loss_step" in row]
    assert train_steps and train_steps == sorted(set(train_steps)) and train_steps[-1] <= steps

    # resumed for one more epoch: W&B writes a second offline folder for the same run id; the printed commands
    # cover both folders of that id, and point `wandb leet` at them
    again = subprocess.run(
        [sys.executable, "-m", "digits_wandb_run.train", "--trainer.max_epochs", "3"],
        cwd=project,
        env=project_environment(project),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    run_dirs = sorted(project.glob("**/offline-run-*"))
    assert len(run_dirs) == 2 and len({path.name.rsplit("-", 1)[1] for path in run_dirs}) == 1, run_dirs
    sync = again.stdout.split("upload the W&B run: ")[1].splitlines()[0]
    executable, command, pattern = sync.split(" ")
    assert os.path.isabs(executable) and executable.endswith("wandb") and command == "sync"
    assert sorted(glob.glob(pattern)) == [str(path) for path in run_dirs]
    assert f"leet {run_dirs[0].parent}" in again.stdout
