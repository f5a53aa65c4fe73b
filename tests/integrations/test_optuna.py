"""The Optuna integration against a real Optuna study and a real MLflow sqlite store, read back with MlflowClient:
every trial a run (params, tags, value), pruning that stops a fit cleanly and leaves its run finished and marked,
trials that never resume each other's checkpoints, the example sweep continued from its storage, and the errors."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tracktrain import Trainer
from tracktrain.distributed.collectives import spawn

from ..trainer._tasks import Classifier, make_loader

optuna = pytest.importorskip("optuna")
tracking = pytest.importorskip("mlflow.tracking")
from tracktrain_integrations.optuna import OptunaPruning, study_run, trial_logger, trial_root_dir  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MAX_EPOCHS = 4


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MLflow's own default artifact root is ./mlruns: never the repository's
    optuna.logging.set_verbosity(optuna.logging.WARNING)


class PruneTrial(optuna.pruners.BasePruner):
    """Prunes trial `number` once it has reported `step`, and nothing else: a pruning that certainly happens."""

    def __init__(self, number: int, step: int) -> None:
        self.number, self.step = number, step

    def prune(self, study, trial) -> bool:
        return trial.number == self.number and trial.last_step is not None and trial.last_step >= self.step


class NanAtSecondValidation(Classifier):
    def eval_step(self, batch, batch_idx):
        if self.trainer.current_epoch == 1:
            self.log("val_loss", torch.tensor(math.nan))
        else:
            super().eval_step(batch, batch_idx)


def objective_for(
    tmp_path, uri, experiment, parent_run_id=None, monitor="val_loss", module_class=Classifier, delivery="thread"
):
    """The objective of the sweeps below: a Classifier with a searched lr and batch size, `resume="auto"` (as a
    sweep that survives crashes would use) in the trial's own root dir. MLflow records go out from a thread but in
    the first test: a sender child costs seconds to start, and each test must stop its own."""

    def objective(trial):
        lr = trial.suggest_float("lr", 0.01, 0.5, log=True)
        batch_size = trial.suggest_categorical("batch_size", [8, 16])
        pruning = OptunaPruning(trial, monitor=monitor)
        trainer = Trainer(
            max_epochs=MAX_EPOCHS,
            seed=0,
            resume="auto",
            default_root_dir=trial_root_dir(str(tmp_path / "sweep"), trial),
            loggers=[trial_logger(trial, uri, experiment, parent_run_id=parent_run_id, delivery=delivery)],
            callbacks=[pruning],
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(module_class(lr), make_loader(batch_size=batch_size), make_loader(n=32, seed=1))
        pruning.raise_if_pruned()
        return float(trainer.callback_metrics["val_loss"])

    return objective


def trial_runs(client, experiment: str) -> dict[int, object]:
    """The experiment's trial runs by trial number (the study's own run left out)."""
    experiment_id = client.get_experiment_by_name(experiment).experiment_id
    runs = [run for run in client.search_runs([experiment_id]) if "optuna.trial_number" in run.data.tags]
    by_number = {int(r.data.tags["optuna.trial_number"]): r for r in runs}
    assert len(by_number) == len({r.info.run_id for r in runs}), "two runs for one trial"
    return by_number


def val_loss_steps(client, run_id: str) -> list[int]:
    return sorted(metric.step for metric in client.get_metric_history(run_id, "val_loss"))


# ------------------------------------------------------------------------------------------------- sweeps
def test_every_trial_is_a_run_nested_under_the_study_with_its_params_and_its_value(sqlite_uri, experiment, tmp_path):
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0), pruner=optuna.pruners.NopPruner())
    with study_run(study, sqlite_uri, experiment) as parent_run_id:
        objective = objective_for(tmp_path, sqlite_uri, experiment, parent_run_id, delivery="process")  # the default
        study.optimize(objective, n_trials=3)

    client = tracking.MlflowClient(sqlite_uri)
    runs = trial_runs(client, experiment)
    assert sorted(runs) == [0, 1, 2]
    for trial in study.trials:
        run = runs[trial.number]
        assert run.info.run_name == f"trial-{trial.number}"
        assert run.info.status == "FINISHED"
        assert float(run.data.params["lr"]) == trial.params["lr"]
        assert int(run.data.params["batch_size"]) == trial.params["batch_size"]
        tags = run.data.tags
        assert tags["optuna.study_name"] == study.study_name and tags["optuna.state"] == "COMPLETE"
        assert tags["mlflow.parentRunId"] == parent_run_id  # nested under the study in the MLflow UI
        assert run.data.metrics["val_loss"] == pytest.approx(trial.value, rel=1e-12)  # the value Optuna recorded
        assert len(val_loss_steps(client, run.info.run_id)) == MAX_EPOCHS
    parent = client.get_run(parent_run_id)
    assert parent.info.status == "FINISHED" and parent.data.tags["optuna.role"] == "study"
    assert parent.data.tags["optuna.best_trial"] == str(study.best_trial.number)
    assert parent.data.metrics["best_value"] == pytest.approx(study.best_value, rel=1e-12)


def test_a_pruned_trial_stops_its_fit_ends_its_run_marked_and_the_next_trial_starts_fresh(
    sqlite_uri, experiment, tmp_path
):
    study = optuna.create_study(pruner=PruneTrial(number=1, step=1))
    study.optimize(objective_for(tmp_path, sqlite_uri, experiment), n_trials=3)

    states = [trial.state for trial in study.trials]
    assert states == [
        optuna.trial.TrialState.COMPLETE,
        optuna.trial.TrialState.PRUNED,
        optuna.trial.TrialState.COMPLETE,
    ]
    assert sorted(study.trials[1].intermediate_values) == [0, 1]  # one report per epoch, until the pruner said so
    client = tracking.MlflowClient(sqlite_uri)
    runs = trial_runs(client, experiment)
    pruned = runs[1]
    assert pruned.info.status == "FINISHED" and pruned.data.tags["optuna.state"] == "PRUNED"  # not left RUNNING
    assert len(val_loss_steps(client, pruned.info.run_id)) == 2 < MAX_EPOCHS  # the fit stopped at the pruning
    # the trial after it is a new fit in its own run (with resume="auto", one root dir would resume trial 1)
    batches = 64 // study.trials[2].params["batch_size"]
    assert val_loss_steps(client, runs[2].info.run_id) == [batches * epoch for epoch in range(1, MAX_EPOCHS + 1)]
    assert runs[2].data.tags["optuna.state"] == "COMPLETE"
    checkpoint_dirs = sorted(p.parent.parent.name for p in (tmp_path / "sweep").glob("*/trial-*/checkpoints/*.pt"))
    assert sorted(set(checkpoint_dirs)) == ["trial-0", "trial-1", "trial-2"]


def test_a_non_finite_value_is_reported_and_prunes_whatever_the_pruner(sqlite_uri, experiment, tmp_path):
    study = optuna.create_study(pruner=optuna.pruners.NopPruner())
    objective = objective_for(tmp_path, sqlite_uri, experiment, module_class=NanAtSecondValidation)
    study.optimize(objective, n_trials=1)

    trial = study.trials[0]
    assert trial.state == optuna.trial.TrialState.PRUNED
    assert math.isnan(trial.intermediate_values[1]) and sorted(trial.intermediate_values) == [0, 1]


def _rank_of_a_pruned_ddp_trial(out_dir: str) -> None:
    """One rank of a 2-process DDP fit of trial 0, which the pruner prunes after epoch 1: only rank 0 holds the trial
    (as with optuna-integration's TorchDistributedTrial); the others pass None."""
    rank = int(os.environ["RANK"])
    study = optuna.create_study(pruner=PruneTrial(number=0, step=1)) if rank == 0 else None
    trial = study.ask() if study is not None else None
    pruning = OptunaPruning(trial)
    trainer = Trainer(
        max_epochs=MAX_EPOCHS,
        strategy="ddp",
        accelerator="cpu",
        loggers=False,
        callbacks=[pruning],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=os.path.join(out_dir, str(rank)),
    )
    trainer.fit(Classifier(), make_loader(), make_loader(n=32, seed=1))
    result = {"epochs": trainer.current_epoch, "pruned": False}
    try:
        pruning.raise_if_pruned()
    except optuna.TrialPruned:
        result["pruned"] = True
    if study is not None:
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        result["reported_steps"] = sorted(study.trials[0].intermediate_values)
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))


@pytest.mark.slow  # two processes with the gloo backend (~10 s)
@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_under_ddp_rank_zero_reports_and_every_rank_stops_at_its_decision(tmp_path):
    spawn(_rank_of_a_pruned_ddp_trial, nprocs=2, args=(str(tmp_path),))
    rank0, rank1 = (json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1))
    assert rank0["reported_steps"] == [0, 1]
    assert rank0["pruned"] and rank1["pruned"]
    assert rank0["epochs"] == rank1["epochs"] == 2 < MAX_EPOCHS


# -------------------------------------------------------------------------------------------------- the example
def _run_example(tmp_path: Path, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "digits_optuna.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.slow  # ~30-60 s: two sweeps, each a new process that imports MLflow and starts its sender child
def test_the_example_sweeps_and_the_same_command_continues_the_study(tmp_path):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    args = ("--trials", "2", "--epochs", "2", "--root-dir", str(tmp_path / "runs"), "--storage", storage)
    first = _run_example(tmp_path, *args)
    second = _run_example(tmp_path, *args)

    assert "0 trials so far" in first and "2 trials so far" in second
    assert [int(n) for n in re.findall(r"^trial\s+(\d+)", second, re.M)] == [2, 3]  # went on, not restarted
    study = optuna.load_study(study_name="digits-mlp", storage=storage)
    assert [trial.number for trial in study.trials] == [0, 1, 2, 3]
    command = re.search(r"view the runs: ((\S*mlflow) ui --backend-store-uri sqlite:///(\S+))$", second, re.M)
    assert command and Path(command.group(3)).is_absolute() and Path(command.group(3)).is_file()
    assert os.access(command.group(2), os.X_OK)  # the mlflow of this environment: pasted, the command runs
    client = tracking.MlflowClient(f"sqlite:///{command.group(3)}")
    experiment_id = client.get_experiment_by_name("digits-optuna").experiment_id
    runs = client.search_runs([experiment_id])
    parents = [run for run in runs if run.data.tags.get("optuna.role") == "study"]
    assert len(parents) == 1  # the continued sweep found its study run again
    trials = [run for run in runs if run not in parents]
    assert sorted(run.info.run_name for run in trials) == ["trial-0", "trial-1", "trial-2", "trial-3"]
    assert {run.data.tags["mlflow.parentRunId"] for run in trials} == {parents[0].info.run_id}


# ------------------------------------------------------------------------------------------------------ errors
def test_a_monitor_never_logged_fails_the_fit_naming_the_logged_metrics(sqlite_uri, experiment, tmp_path):
    study = optuna.create_study()
    with pytest.raises(KeyError, match=r"OptunaPruning monitors 'val_acc', which was never logged.*'val_loss'"):
        study.optimize(objective_for(tmp_path, sqlite_uri, experiment, monitor="val_acc"), n_trials=1)
    assert study.trials[0].state == optuna.trial.TrialState.FAIL
    run = trial_runs(tracking.MlflowClient(sqlite_uri), experiment)[0]
    assert run.info.status == "FAILED"


def test_bad_arguments_are_refused_with_the_fix():
    study = optuna.create_study()
    trial = study.ask()
    with pytest.raises(TypeError, match=r"the optuna.Trial given to the objective, got FrozenTrial"):
        OptunaPruning(study.trials[0])
    with pytest.raises(TypeError, match=r"monitor=...\) must be the name of a logged metric, got ''"):
        OptunaPruning(trial, monitor="")
    with pytest.raises(ValueError, match=r"must name the one MLflow store of the whole sweep.*got None"):
        trial_logger(trial, tracking_uri=None)
    two = optuna.create_study(directions=["minimize", "maximize"])
    with pytest.raises(ValueError, match=r"optimizes 2 objectives, and Optuna prunes single-objective studies only"):
        OptunaPruning(two.ask())


def test_a_fit_that_was_not_pruned_raises_nothing(tmp_path):
    study = optuna.create_study()
    trial = study.ask()
    pruning = OptunaPruning(trial)
    trainer = Trainer(max_epochs=1, loggers=False, callbacks=[pruning], default_root_dir=tmp_path)
    trainer.fit(Classifier(), make_loader(), make_loader(n=16))
    pruning.raise_if_pruned()
    assert study.trials[0].intermediate_values.keys() == {0}


def test_trial_root_dirs_differ_by_study_and_trial():
    first, second = optuna.create_study(study_name="a/b"), optuna.create_study(study_name="c")
    assert trial_root_dir("root/", first.ask()) == "root/a_b/trial-0"
    assert trial_root_dir("s3://bucket/x", second.ask()) == "s3://bucket/x/c/trial-0"
