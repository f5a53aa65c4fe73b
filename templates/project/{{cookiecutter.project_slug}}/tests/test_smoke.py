{%- set over_processes = cookiecutter.strategy in ("ddp", "fsdp") -%}
{%- set extension = "dcp" if cookiecutter.strategy == "fsdp" else "pt" -%}
"""A fast fit on the real data with the project's own tracker, then a second command that resumes it{% if over_processes %}: on 2
processes started by torchrun (gloo on a CPU), as the README launches them, and on 1 without torchrun{% endif %}."""

from __future__ import annotations

import glob
import re
{%- if over_processes %}
import shlex
import sys
{%- endif %}

import fsspec
{%- if cookiecutter.tracker in ("mlflow", "both") %}
import pytest
{%- endif %}

from {{ cookiecutter.project_slug }}.find_lr import main as find_lr_main
{%- if over_processes %}
from {{ cookiecutter.project_slug }}.train import default_config, installed, main
{%- else %}
from {{ cookiecutter.project_slug }}.train import TrainCLI, default_config, fit, how_to_view, main
{%- endif %}

{%- if over_processes %}

# each of the 2 processes trains on its half of the 1437 training images in batches of 64: 12 steps an epoch
STEPS_PER_EPOCH = 12
TORCHRUN = [installed("torchrun"), "--standalone", "--nproc_per_node", "2"]  # the README's launcher
{%- else %}

STEPS_PER_EPOCH = 12  # 1437 training images in batches of 128
{%- endif %}


def fast(checkpoint_dir: str) -> list[str]:
    """Small and fast: short epochs, checkpoints in `checkpoint_dir`, logs in the test's directory."""
    return ["--data.batch_size={{ 64 if over_processes else 128 }}", "--trainer.default_root_dir=runs",
            f"--checkpoint.dirpath={checkpoint_dir}", "--trainer.enable_progress_bar=false"]


def checkpoint_names(checkpoint_dir: str, folder: str = "") -> set[str]:
    """The names in the checkpoint directory (a local path or a URL), or in one of its folders."""
    filesystem, path = fsspec.core.url_to_fs(checkpoint_dir)
    filesystem.invalidate_cache()  # an object store's listing, as it is now (not as an earlier call saw it)
    entries = filesystem.ls(f"{path}/{folder}".rstrip("/"), detail=False)
    return {entry.rstrip("/").rsplit("/", 1)[-1] for entry in entries}


def assert_tracked(run_dir, val_accuracy: float, how_to_view: str) -> None:
    """The fit's record in the project's tracker (`how_to_view`: the commands the run printed to look at it)."""
{%- if cookiecutter.tracker in ("mlflow", "both") %}
    # the run is in the embedded MLflow database, finished, with the logged values
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{run_dir / 'runs' / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("{{ cookiecutter.project_slug }}")
    (run,) = client.search_runs([experiment.experiment_id])  # one run{% if over_processes %}: not one per process{% endif %}
    assert run.info.status == "FINISHED"
    assert {"train_loss_step", "val_loss", "val_accuracy"} <= set(run.data.metrics)
    assert run.data.metrics["val_accuracy"] == pytest.approx(val_accuracy, abs=1e-4)
    plots = [artifact.path for artifact in client.list_artifacts(run.info.run_id, "plots")]
    assert sum(path.endswith(".png") and "confusion_matrix" in path for path in plots) == 2
    assert uri in how_to_view
{%- endif %}
{%- if cookiecutter.tracker in ("wandb", "both") %}
    # the offline W&B run is on disk
    assert len(glob.glob(str(run_dir / "wandb-home" / "wandb" / "offline-run-*" / "*.wandb"))) == 1
    assert "wandb sync" in how_to_view
{%- endif %}
{%- if cookiecutter.tracker == "none" %}
    # without a tracker the values go to a CSV log
    assert glob.glob(str(run_dir / "runs" / "lightning_logs" / "**" / "metrics.csv"), recursive=True)
{%- endif %}
{%- if over_processes %}


def test_a_short_fit_on_two_processes_checkpoints_is_tracked_and_the_same_command_resumes(isolated_run, checkpoint_dir,
                                                                                          run_command):
    command = [*TORCHRUN, "-m", "{{ cookiecutter.project_slug }}.train", *fast(checkpoint_dir)]
    first = run_command([*command, "--trainer.max_epochs=2"])

    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert first.stdout.count(f"final metrics after {2 * STEPS_PER_EPOCH} steps") == 1  # rank 0 reports, once
    val_accuracy = float(re.search(r"val_accuracy (\S+)", first.stdout).group(1))
    assert val_accuracy > 0.5  # chance is 0.1
    last = f"last_checkpoint_{2 * STEPS_PER_EPOCH}.{{ extension }}"
    assert {last, f"{last}.manifest.json"} <= checkpoint_names(checkpoint_dir)  # committed: its manifest is there
{%- if cookiecutter.strategy == "fsdp" %}
    # sharded: a directory with each process's shard of the weights and optimizer state
    assert len([name for name in checkpoint_names(checkpoint_dir, last) if name.endswith(".distcp")]) == 2
{%- endif %}
    # each epoch's confusion matrix and per-class precision/recall/F1, as images
    assert len(glob.glob(str(isolated_run / "runs" / "plots" / "confusion_matrix_epoch*.png"))) == 2
    assert_tracked(isolated_run, val_accuracy, first.stdout)

    # the same command with one more epoch continues from the newest checkpoint, on both processes
    second = run_command([*command, "--trainer.max_epochs=3"])

    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert re.search(r"resumed from (\S+)", second.stdout).group(1).endswith(f"/{last}")
    assert second.stdout.count(f"final metrics after {3 * STEPS_PER_EPOCH} steps") == 1
    assert f"last_checkpoint_{3 * STEPS_PER_EPOCH}.{{ extension }}.manifest.json" in checkpoint_names(checkpoint_dir)
{%- if cookiecutter.tracker in ("mlflow", "both") %}
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{isolated_run / 'runs' / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("{{ cookiecutter.project_slug }}").experiment_id])
    validated = sorted(metric.step for metric in client.get_metric_history(run.info.run_id, "val_accuracy"))
    assert validated == [STEPS_PER_EPOCH, 2 * STEPS_PER_EPOCH, 3 * STEPS_PER_EPOCH]  # the same run, continued
{%- endif %}


def test_without_torchrun_it_trains_as_one_process_and_says_how_to_start_more(isolated_run, checkpoint_dir,
                                                                               run_command):
    settings = [*fast(checkpoint_dir), "--trainer.max_epochs=1"]
    result = run_command([sys.executable, "-m", "{{ cookiecutter.project_slug }}.train", *settings])

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    hint = re.search(r"strategy='{{ cookiecutter.strategy }}' on 1 process, as torchrun did not start it; with torchrun "
                     r"\(one process per GPU, or 2 on a CPU\): (.*)", result.stdout)
    assert hint, result.stdout[-3000:]
    assert shlex.split(hint.group(1)) == [*TORCHRUN, "-m", "{{ cookiecutter.project_slug }}.train", *settings]
    steps = 23  # one process: all 1437 training images in batches of 64
    assert f"final metrics after {steps} steps" in result.stdout
    assert f"last_checkpoint_{steps}.{{ extension }}.manifest.json" in checkpoint_names(checkpoint_dir)
{%- else %}


def test_a_short_fit_learns_checkpoints_and_is_tracked(isolated_run, checkpoint_dir):
    cli = TrainCLI([*fast(checkpoint_dir), "--trainer.max_epochs=2"])
    result = fit(cli)

    assert result.global_step == 2 * STEPS_PER_EPOCH
    assert result.resumed_from is None
    assert result.metrics["val_accuracy"] > 0.5  # chance is 0.1
    # committed checkpoints: each file with its manifest
    assert [name for name in checkpoint_names(checkpoint_dir) if name.endswith(".{{ extension }}.manifest.json")]
    # each epoch's confusion matrix and per-class precision/recall/F1, as images
    assert len(glob.glob(str(isolated_run / "runs" / "plots" / "confusion_matrix_epoch*.png"))) == 2
    assert_tracked(isolated_run, result.metrics["val_accuracy"], "\n".join(how_to_view(cli.trainer)))
    assert (isolated_run / "runs" / "config.yaml").is_file()  # the merged config, saved with the run


def test_the_same_command_again_resumes_and_trains_only_the_new_epochs(checkpoint_dir, capsys):
    fast_args = [*fast(checkpoint_dir), "--trainer.max_epochs=2"]
    assert main(fast_args) == 0

    first = capsys.readouterr().out
    assert f"final metrics after {2 * STEPS_PER_EPOCH} steps" in first and "resumed from" not in first
    assert main([*fast_args, "--trainer.max_epochs=3"]) == 0

    second = capsys.readouterr().out
    assert "resumed from " in second and f"final metrics after {3 * STEPS_PER_EPOCH} steps" in second
{%- endif %}


def test_the_learning_rate_finder_suggests_a_rate_and_saves_its_curve(isolated_run, checkpoint_dir, capsys):
    settings = ["--data.batch_size=32", "--trainer.default_root_dir=runs", f"--checkpoint.dirpath={checkpoint_dir}"]
    assert find_lr_main(["--steps", "40", *settings]) == 0
    out = capsys.readouterr().out
    suggested = float(re.search(r"suggested learning rate: (\S+)", out).group(1))
    assert 1e-5 < suggested < 1.0
    assert f"-m {{ cookiecutter.project_slug }}.train --model.lr {suggested:.3g}" in out
    assert (isolated_run / "runs" / "lr_find.png").stat().st_size > 0
    filesystem, path = fsspec.core.url_to_fs(checkpoint_dir)
    assert not filesystem.exists(path)  # the training run is left as it was
{%- if cookiecutter.tracker in ("mlflow", "both") %}
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{isolated_run / 'runs' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("{{ cookiecutter.project_slug }}")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "lr_find"
    assert any(artifact.path.endswith(".png") for artifact in client.list_artifacts(run.info.run_id, "lr_find"))
{%- endif %}


def test_the_config_and_the_options_are_checked(capsys):
    """LightningCLI's parser: every key against the signature of the class it goes to, every value against its type."""
    assert default_config()["trainer"]["max_epochs"] == 10
    assert main(["--print_config"]) == 0
    printed = capsys.readouterr().out
    assert "max_epochs: 10" in printed and "class_path: tracktrain.callbacks.ModelSummary" in printed
    for argv, message in (
        (["--trainer.max_epochs=three"], "trainer.max_epochs"),
        (["--trainer.epochs=3"], "unrecognized arguments: --trainer.epochs=3. Did you mean trainer."),
        (["--model.hiden=3"], "hiden"),
        (["--data.batch_size=0"], "data.batch_size must be at least 1, got 0"),
        (["--trainer.strategy=dp"], "Trainer(strategy=...) must be one of"),
        (["--trainer.strategy=ddp", "--checkpoint.dirpath=memory://checkpoints"], "lives in one process's memory"),
    ):
        assert main(argv) == 2, argv
        assert message in capsys.readouterr().err, argv
