"""A fast fit on the real data with the project's own tracker, then a second command that resumes it."""

from __future__ import annotations

import glob
import re

import pytest

from {{ cookiecutter.project_slug }}.config import ConfigError, default_values, load_config, parse_override
from {{ cookiecutter.project_slug }}.find_lr import main as find_lr_main
from {{ cookiecutter.project_slug }}.train import fit, how_to_view, main

# small and fast: two short epochs, checkpoints and logs in the test's directory
FAST = ["trainer.max_epochs=2", "data.batch_size=128", 'run.root_dir="runs"', 'run.checkpoint_dir="runs/checkpoints"',
        'trainer.progress_bar="never"']


def test_a_short_fit_learns_checkpoints_and_is_tracked(isolated_run):
    config = load_config(overrides=FAST)
    result = fit(config)

    assert result.global_step == 2 * 12  # 1437 training images in batches of 128
    assert result.resumed_from is None
    assert result.metrics["val_accuracy"] > 0.5  # chance is 0.1
    # committed checkpoints: a file (or, under strategy="fsdp", a directory of shards) with its manifest
    assert glob.glob(str(isolated_run / "runs" / "checkpoints" / "*.manifest.json"))
    # each epoch's confusion matrix and per-class precision/recall/F1, as images
    assert len(glob.glob(str(isolated_run / "runs" / "plots" / "confusion_matrix_epoch*.png"))) == 2
{%- if cookiecutter.tracker in ("mlflow", "both") %}
    # the run is in the embedded MLflow database, finished, with the logged values
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{isolated_run / 'runs' / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("{{ cookiecutter.project_slug }}")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    assert {"train_loss_step", "val_loss", "val_accuracy"} <= set(run.data.metrics)
    assert run.data.metrics["val_accuracy"] == pytest.approx(result.metrics["val_accuracy"])
    plots = [artifact.path for artifact in client.list_artifacts(run.info.run_id, "plots")]
    assert sum(path.endswith(".png") and "confusion_matrix" in path for path in plots) == 2
    assert any(uri in line for line in how_to_view(config))
{%- endif %}
{%- if cookiecutter.tracker in ("wandb", "both") %}
    # the offline W&B run is on disk
    assert len(glob.glob(str(isolated_run / "wandb-home" / "wandb" / "offline-run-*" / "*.wandb"))) == 1
    assert any("wandb sync" in line for line in how_to_view(config))
{%- endif %}
{%- if cookiecutter.tracker == "none" %}
    # without a tracker the values go to a CSV log
    assert glob.glob(str(isolated_run / "runs" / "logs" / "**" / "*.csv"), recursive=True)
{%- endif %}


def test_the_same_command_again_resumes_and_trains_only_the_new_epochs(isolated_run, capsys):
    fast_args = [argument for setting in FAST for argument in ("--set", setting)]
    assert main(fast_args) == 0

    first = capsys.readouterr().out
    assert "final metrics after 24 steps" in first and "resumed from" not in first
    assert main([*fast_args, "--epochs", "3"]) == 0

    second = capsys.readouterr().out
    assert "resumed from " in second and "final metrics after 36 steps" in second


def test_the_learning_rate_finder_suggests_a_rate_and_saves_its_curve(isolated_run, capsys):
    settings = ["data.batch_size=32", 'run.root_dir="runs"', 'run.checkpoint_dir="runs/checkpoints"']
    assert find_lr_main(["--steps", "40", *[argument for setting in settings for argument in ("--set", setting)]]) == 0
    out = capsys.readouterr().out
    suggested = float(re.search(r"suggested learning rate: (\S+)", out).group(1))
    assert 1e-5 < suggested < 1.0
    assert f"-m {{ cookiecutter.project_slug }}.train --set model.lr={suggested:.3g}" in out
    assert (isolated_run / "runs" / "lr_find.png").stat().st_size > 0
    assert not (isolated_run / "runs" / "checkpoints").exists()  # the training run is left as it was
{%- if cookiecutter.tracker in ("mlflow", "both") %}
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{isolated_run / 'runs' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("{{ cookiecutter.project_slug }}")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "lr_find"
    assert any(artifact.path.endswith(".png") for artifact in client.list_artifacts(run.info.run_id, "lr_find"))
{%- endif %}


def test_the_config_file_and_overrides_are_typed():
    assert load_config().to_dict() == default_values()
    assert load_config(overrides=["model.lr=0.1", "trainer.max_epochs=3"]).model.lr == 0.1
    assert parse_override("tracking.tracker=none") == ("tracking", "tracker", "none")
    with pytest.raises(ConfigError, match="trainer.max_epochs must be int, got 'three'"):
        load_config(overrides=["trainer.max_epochs=three"])
    with pytest.raises(ConfigError, match=r"unknown key trainer.epochs; \[trainer\] has"):
        load_config(overrides=["trainer.epochs=3"])
    with pytest.raises(ConfigError, match="tracking.tracker must be one of"):
        load_config(overrides=["tracking.tracker=tensorboard"])
