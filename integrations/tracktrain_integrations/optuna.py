"""Optuna for the Trainer: prune a trial's fit from the metric it logs, and keep each trial as an MLflow run.

.. code-block:: python

    def objective(trial):
        pruning = OptunaPruning(trial, monitor="val_loss")
        trainer = Trainer(
            max_epochs=20,
            default_root_dir=trial_root_dir("runs/sweep", trial),  # a fresh fit (and checkpoints) per trial
            loggers=[trial_logger(trial, tracking_uri="sqlite:///mlflow.db", parent_run_id=parent)],
            callbacks=[pruning],
        )
        trainer.fit(Classifier(lr=trial.suggest_float("lr", 1e-3, 0.3, log=True)), train_loader, val_loader)
        pruning.raise_if_pruned()  # optuna.TrialPruned when the pruner stopped the fit
        return float(trainer.callback_metrics["val_loss"])


    with study_run(study, tracking_uri="sqlite:///mlflow.db") as parent:  # the study's MLflow run
        study.optimize(objective, n_trials=20)

- `OptunaPruning` reports the monitored value to the trial after each validation of the fit and, when the study's
  pruner says so, stops the fit cleanly (as `EarlyStopping` does); `raise_if_pruned()` then raises
  `optuna.TrialPruned` for the objective to hand to Optuna. It also gives the fit's tracker runs the trial's params
  and an `optuna.state` tag (PRUNED, or COMPLETE when the fit ran to its end).
- `trial_logger` is an `MLflowLogger` for one trial: run `trial-<number>`, tagged with the study and the trial, and
  nested under the study's run (`study_run`) in the MLflow UI.
- `trial_root_dir` is a directory of the trial's own, so that no trial resumes (or prunes the retention of) the
  checkpoints of another.

Needs Optuna: `pip install 'tracktrain[optuna]'` (and MLflow for the runs: `tracktrain[mlflow]`).
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from tracktrain.callbacks.base import Callback, CallbackPhase
from tracktrain.distributed.boundary import Boundary, Decision
from tracktrain.distributed.ranks import global_rank
from tracktrain.trainer.monitor import monitored_value

if TYPE_CHECKING:
    from tracktrain.trainer.module import LoopModule
    from tracktrain.trainer.surface import TrainerSurface
    from tracktrain_integrations.mlflow import MLflowLogger

__all__ = ["OptunaPruning", "study_run", "trial_logger", "trial_root_dir"]

# tags every trial's run carries (MLflow shows them as columns; filter with `tags.optuna.state = 'PRUNED'`)
STUDY_TAG = "optuna.study_name"
TRIAL_TAG = "optuna.trial_number"
STATE_TAG = "optuna.state"
ROLE_TAG = "optuna.role"  # "study" on the parent run: how a resumed sweep finds it again
PARENT_TAG = "mlflow.parentRunId"  # read by the MLflow UI to nest a run under another


def _optuna() -> Any:
    try:
        import optuna
    except ImportError as error:
        raise ImportError(f"The Optuna integration needs Optuna ({error}): pip install 'tracktrain[optuna]'") from error
    return optuna


class OptunaPruning(Callback):
    """Prunes an Optuna trial from inside `trainer.fit`: at each check it calls `trial.report(value, step)` with the
    logged metric `monitor`, and when `trial.should_prune()` it stops the fit the way `EarlyStopping` does (the epoch
    ends, its checkpoints save, the tracker runs end FINISHED). After `fit` returns, call `raise_if_pruned()`:
    it raises `optuna.TrialPruned`, which marks the trial PRUNED in the study.

    Why not raise `TrialPruned` inside the fit, as optuna-integration's Lightning callback does without DDP: an
    exception out of a hook ends the fit as a failure (tracker runs FAILED, no last checkpoint) and, under DDP,
    leaves the other ranks waiting; a clean stop followed by one explicit raise reads the same in every setting.

    A check comes at the end of each validation in fit (each epoch, or every `val_check_interval` batches), or at
    the end of each training epoch when the fit has no validation, as `EarlyStopping`. The step reported is the
    epoch, or the global step when the Trainer validates every `val_check_interval` batches (Optuna ignores a
    second report at the same step).

    A value that is NaN or infinite is reported and prunes the trial whatever the pruner (most pruners ignore a
    NaN): a diverged fit does not recover, and the NaN it would return makes Optuna mark the trial FAIL anyway.

    At fit start the callback gives the fit's loggers (`trainer.loggers`) the trial's params and the tags
    `optuna.study_name` and `optuna.trial_number`; when training ends, the tag `optuna.state` says PRUNED or
    COMPLETE (the fit ran to its end; the objective may still fail after it, which Optuna then records).

    Under torch.distributed only rank 0 talks to the study (reports, asks the pruner, tags runs): Optuna's guidance
    for DDP is one trial object, on rank 0, shared with the others (optuna-integration's `TorchDistributedTrial`).
    Rank 0's decision is agreed by every rank at the boundary (one exchange, with the Trainer's other decisions), so
    all ranks stop at the same step and `raise_if_pruned()` raises on each of them; on the other ranks `trial` may
    be anything (None, a `TorchDistributedTrial`): it is not used there.

    Args:
        trial: the `optuna.Trial` the objective was given (single-objective studies: Optuna prunes only those).
        monitor: the logged metric to report (e.g. "val_loss"); the study's direction says which way is better.
    """

    phase = CallbackPhase.AFTER_DECISIONS  # as EarlyStopping: after the hooks, which may log what is monitored

    def __init__(self, trial: Any, monitor: str = "val_loss") -> None:
        optuna = _optuna()
        if not isinstance(monitor, str) or not monitor:
            raise TypeError(f"OptunaPruning(monitor=...) must be the name of a logged metric, got {monitor!r}.")
        if global_rank() == 0:
            _check_trial(trial, optuna)
        self.trial = trial
        self.monitor = monitor
        self.pruned = False
        self.last_report: tuple[int, float] | None = None  # (step, value) last reported to the trial, on rank 0
        self._trial_pruned = optuna.TrialPruned

    @property
    def state_key(self) -> str:
        return f"OptunaPruning{{'monitor': {self.monitor!r}}}"

    # ------------------------------------------------------------------------------------------- the check
    def decisions(self, trainer: TrainerSurface) -> Iterable[Decision]:
        """One check per validation of fit (per training epoch without validation); rank 0's answer is everyone's."""
        at_epoch_end = trainer.val_dataloaders is None
        return [
            Decision(
                Boundary.TRAIN_EPOCH_END if at_epoch_end else Boundary.VALIDATION_END,
                f"OptunaPruning({self.monitor})",
                propose=lambda: self._propose(trainer) if global_rank() == 0 else False,
                agree="rank_zero",
                act=lambda agreed: self._act(trainer, agreed),
            )
        ]

    def _propose(self, trainer: TrainerSurface) -> bool:
        """Report this check's value to the trial (rank 0); whether to prune."""
        value = monitored_value(trainer.callback_metrics, self.monitor, "OptunaPruning")  # the check's one sync
        step = trainer.global_step if trainer.val_check_interval else trainer.current_epoch
        self.trial.report(value, step=step)
        self.last_report = (step, value)
        return not math.isfinite(value) or self.trial.should_prune()

    def _act(self, trainer: TrainerSurface, agreed: float) -> None:
        if not agreed:
            return
        self.pruned = True
        if global_rank() == 0:
            _tag_runs(trainer, {STATE_TAG: "PRUNED"})
        trainer.stop(agreed=True)  # agreed on by every rank at the boundary

    # ----------------------------------------------------------------------------------------- the runs
    def on_fit_start(self, trainer: TrainerSurface, module: LoopModule) -> None:
        self.pruned, self.last_report = False, None
        if global_rank() != 0:  # the tracker runs live on rank 0
            return
        for logger in trainer.loggers:
            logger.log_hyperparams(self.trial.params)
        _tag_runs(trainer, {STUDY_TAG: self.trial.study.study_name, TRIAL_TAG: self.trial.number})

    def on_train_end(self, trainer: TrainerSurface, module: LoopModule) -> None:
        if global_rank() == 0 and not self.pruned:
            _tag_runs(trainer, {STATE_TAG: "COMPLETE"})

    def raise_if_pruned(self) -> None:
        """Raise `optuna.TrialPruned` when the pruner stopped the last fit (on every rank); else do nothing."""
        if not self.pruned:
            return
        if self.last_report is None:  # ranks other than 0 only know that rank 0 pruned
            raise self._trial_pruned("Trial pruned (decided on rank 0).")
        step, value = self.last_report
        raise self._trial_pruned(f"Trial {self.trial.number} pruned at step {step}: {self.monitor} = {value}.")


def _check_trial(trial: Any, optuna: Any) -> None:
    if not isinstance(trial, optuna.Trial):
        raise TypeError(
            f"OptunaPruning(trial=...) must be the optuna.Trial given to the objective, got {type(trial).__name__}."
        )
    if len(trial.study.directions) > 1:
        raise ValueError(
            f"OptunaPruning: study {trial.study.study_name!r} optimizes {len(trial.study.directions)} objectives, and "
            "Optuna prunes single-objective studies only. Leave the callback out, or optimize one objective."
        )


def _tag_runs(trainer: TrainerSurface, tags: dict[str, Any]) -> None:
    for logger in trainer.loggers:
        logger.set_tags({key: str(value) for key, value in tags.items()})


# ---------------------------------------------------------------------------------------------- MLflow runs
def trial_root_dir(root: str, trial: Any) -> str:
    """`{root}/{study name}/trial-{number}`: the trial's own `default_root_dir`, so that its fit starts fresh even
    with `Trainer(resume="auto")` and its checkpoints never mix with another trial's (a path or fsspec URL)."""
    study = re.sub(r"[^A-Za-z0-9_.-]", "_", trial.study.study_name)
    return f"{str(root).rstrip('/')}/{study}/trial-{trial.number}"


def trial_logger(
    trial: Any,
    tracking_uri: str,
    experiment_name: str = "tracktrain",
    parent_run_id: str | None = None,
    **mlflow_logger_options: Any,
) -> MLflowLogger:
    """An `MLflowLogger` for the trial's fit: run `trial-<number>` tagged `optuna.study_name` and
    `optuna.trial_number`, nested under `parent_run_id` (from `study_run`) when given. Pair it with `OptunaPruning`,
    which logs the trial's params and its `optuna.state`.

    `tracking_uri` is required: every trial's run must land in one store, while MLflowLogger's default is a database
    inside each fit's own root dir. Other options go to `MLflowLogger`."""
    from tracktrain_integrations.mlflow import MLflowLogger

    if not isinstance(tracking_uri, str) or not tracking_uri:
        raise ValueError(
            f"trial_logger(tracking_uri=...) must name the one MLflow store of the whole sweep (e.g. "
            f"'sqlite:///mlflow.db' or 'http://127.0.0.1:5000'), got {tracking_uri!r}."
        )
    tags = {STUDY_TAG: trial.study.study_name, TRIAL_TAG: str(trial.number)}
    if parent_run_id is not None:
        tags[PARENT_TAG] = parent_run_id
    tags.update(mlflow_logger_options.pop("tags", None) or {})
    return MLflowLogger(
        tracking_uri=tracking_uri,
        experiment_name=experiment_name,
        run_name=f"trial-{trial.number}",
        tags=tags,
        **mlflow_logger_options,
    )


@contextlib.contextmanager
def study_run(study: Any, tracking_uri: str, experiment_name: str = "tracktrain") -> Iterator[str]:
    """The study's own MLflow run (`study-<name>`, RUNNING while the block runs), whose id nests the trials' runs
    (`trial_logger(parent_run_id=...)`). A sweep resumed from the same Optuna storage finds the same run again. On
    exit the run gets the best trial so far (tags `optuna.best_trial`, metric `best_value`) and ends FINISHED
    (FAILED on an exception, KILLED on Ctrl-C)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    experiment_id = _experiment_id(client, experiment_name)
    run_id = _find_study_run(client, experiment_id, study.study_name)
    if run_id is None:
        tags = {STUDY_TAG: study.study_name, ROLE_TAG: "study"}
        run_id = client.create_run(experiment_id, run_name=f"study-{study.study_name}", tags=tags).info.run_id
    else:
        client.update_run(run_id, status="RUNNING")
    status = "FAILED"
    try:
        yield run_id
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        _log_best(client, run_id, study)
        client.set_terminated(run_id, status)


def _experiment_id(client: Any, experiment_name: str) -> str:
    from tracktrain_integrations.mlflow_run import EXPERIMENT_TAGS

    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        return client.create_experiment(experiment_name, tags=EXPERIMENT_TAGS)
    if experiment.lifecycle_stage == "deleted":
        raise ValueError(
            f"MLflow experiment {experiment_name!r} is deleted. Restore it with `mlflow experiments restore "
            f"--experiment-id {experiment.experiment_id}` or choose another experiment_name."
        )
    return experiment.experiment_id


def _find_study_run(client: Any, experiment_id: str, study_name: str) -> str | None:
    quoted = study_name.replace("'", "\\'")
    runs = client.search_runs(
        [experiment_id], filter_string=f"tags.`{STUDY_TAG}` = '{quoted}' and tags.`{ROLE_TAG}` = 'study'", max_results=1
    )
    return runs[0].info.run_id if runs else None


def _log_best(client: Any, run_id: str, study: Any) -> None:
    """The best trial so far on the study's run (none yet: nothing; multi-objective: the trial numbers)."""
    optuna = _optuna()
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not complete:
        return
    if len(study.directions) > 1:
        client.set_tag(run_id, "optuna.best_trials", ",".join(str(t.number) for t in study.best_trials))
        return
    best = study.best_trial
    client.set_tag(run_id, "optuna.best_trial", str(best.number))
    client.set_tag(run_id, "optuna.best_params", repr(best.params))
    client.log_metric(run_id, "best_value", best.value, step=len(study.trials))
