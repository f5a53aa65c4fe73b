"""Search the digits MLP's learning rate, width and dropout with Optuna: each trial an MLflow run, pruned early by a
MedianPruner from the val_loss it logs.

Each trial is a fit of its own (its own root dir, so no trial resumes another's checkpoints), logged to MLflow as
`trial-<n>` under the study's run. The study lives in an Optuna storage (a sqlite file by default): running the same
command again continues the sweep with --trials more trials. Runs offline: the digits data ships inside scikit-learn.

    python examples/digits_optuna.py --trials 12 --epochs 8
"""

from __future__ import annotations

import argparse
import os
import sys

import optuna
import torch
from digits_data import digits_loaders
from digits_mlp import DigitsClassifier
from torch import nn

from tracktrain import Trainer
from tracktrain.trainer.nonfinite import NonFiniteLoss
from tracktrain_integrations.optuna import OptunaPruning, study_run, trial_logger, trial_root_dir


class SweepClassifier(DigitsClassifier):
    """The README's DigitsClassifier with its dropout rate searched too."""

    def __init__(self, lr: float, hidden: int, dropout: float) -> None:
        super().__init__(lr=lr, hidden=hidden)
        dropout_layer = self.net[2]
        assert isinstance(dropout_layer, nn.Dropout)  # DigitsClassifier's layers: Linear, ReLU, Dropout, Linear
        dropout_layer.p = dropout


def objective(trial: optuna.Trial, args: argparse.Namespace, parent_run_id: str) -> float:
    module = SweepClassifier(
        lr=trial.suggest_float("lr", 1e-3, 0.3, log=True),
        hidden=trial.suggest_int("hidden", 16, 256, log=True),
        dropout=trial.suggest_float("dropout", 0.0, 0.5),
    )
    pruning = OptunaPruning(trial, monitor="val_loss")
    trainer = Trainer(
        max_epochs=args.epochs,
        seed=args.seed,
        default_root_dir=trial_root_dir(args.root_dir, trial),
        loggers=[trial_logger(trial, args.tracking_uri, args.experiment, parent_run_id=parent_run_id)],
        callbacks=[pruning],
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    train_loader, val_loader = digits_loaders(args.batch_size, args.seed)
    trainer.fit(module, train_loader, val_loader)
    pruning.raise_if_pruned()  # optuna.TrialPruned: Optuna marks the trial PRUNED
    return float(trainer.callback_metrics["val_loss"])


def print_trial(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """One line per finished trial (an Optuna callback)."""
    epochs = len(trial.intermediate_values)
    value = "" if trial.value is None else f"val_loss {trial.value:.4f}"
    params = "  ".join(f"{name} {value:.4g}" for name, value in trial.params.items())
    print(f"trial {trial.number:3d}  {trial.state.name:8s} after {epochs:2d} epochs  {value:16s} {params}", flush=True)


def mlflow_ui_command(tracking_uri: str) -> str:
    """What to paste to look at the runs: a sqlite path made absolute, so the command works from any directory."""
    prefix = "sqlite:///"
    if tracking_uri.startswith(prefix):
        path = os.path.abspath(tracking_uri[len(prefix) :])
        # the mlflow beside this interpreter: a virtual environment's bin/ is rarely on PATH
        mlflow = os.path.join(os.path.dirname(sys.executable), "mlflow")
        return f"{mlflow if os.path.exists(mlflow) else 'mlflow'} ui --backend-store-uri sqlite:///{path}"
    return f"open {tracking_uri} in a browser"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=12, help="trials to run (more, when the study exists)")
    parser.add_argument("--epochs", type=int, default=8, help="max epochs of a trial that is not pruned")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root-dir", default="runs/digits_optuna", help="trial checkpoints go to ROOT/STUDY/trial-N")
    parser.add_argument("--tracking-uri", default=None, help="MLflow store; default: sqlite:///ROOT/mlflow.db")
    parser.add_argument("--storage", default=None, help="Optuna storage; default: sqlite:///ROOT/optuna.db")
    parser.add_argument("--study-name", default="digits-mlp")
    parser.add_argument("--experiment", default="digits-optuna", help="the MLflow experiment")
    args = parser.parse_args()
    torch.set_num_threads(1)  # this MLP's matrices are too small to split across threads: one is faster
    os.makedirs(args.root_dir, exist_ok=True)
    args.tracking_uri = args.tracking_uri or f"sqlite:///{args.root_dir}/mlflow.db"
    args.storage = args.storage or f"sqlite:///{args.root_dir}/optuna.db"

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # print_trial says what Optuna would log
    study = optuna.create_study(
        study_name=args.study_name,
        storage=args.storage,
        load_if_exists=True,  # the same command continues the sweep
        direction="minimize",
        sampler=optuna.samplers.TPESampler(seed=args.seed),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=2),
    )
    print(f"study {study.study_name}: {len(study.trials)} trials so far, {args.trials} more", flush=True)
    with study_run(study, args.tracking_uri, args.experiment) as parent_run_id:
        study.optimize(
            lambda trial: objective(trial, args, parent_run_id),
            n_trials=args.trials,
            catch=(NonFiniteLoss,),  # a learning rate that diverges fails its trial, not the sweep
            callbacks=[print_trial],
        )
    best = study.best_trial
    print(f"best trial {best.number}: val_loss {best.value:.4f} with {best.params}")
    print(f"view the runs: {mlflow_ui_command(args.tracking_uri)}")


if __name__ == "__main__":
    main()
