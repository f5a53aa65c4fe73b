"""Train: `python -m {{ cookiecutter.project_slug }}.train [--config FILE] [--set section.key=value ...]`.

Resumes by default: run the same command again after a crash or Ctrl-C and it continues from the newest complete
checkpoint, in the same tracker run. Under DDP: `torchrun --standalone --nproc_per_node 2 -m
{{ cookiecutter.project_slug }}.train --set trainer.strategy=ddp`; without torchrun, strategy "ddp" or "fsdp" trains
as a world of one process.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from {{ cookiecutter.project_slug }}.config import OVER_PROCESSES, Config, ConfigError, load_config


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m {{ cookiecutter.project_slug }}.train",
                                     description="Train the model; resumes from the newest checkpoint by default.")
    parser.add_argument("--config", help="a TOML file whose keys replace the defaults (default: ./config.toml when "
                                         "it exists)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="replace one value, e.g. --set trainer.max_epochs=20 (repeatable)")
    parser.add_argument("--epochs", type=int, help="shortcut for --set trainer.max_epochs=N")
    parser.add_argument("--no-resume", action="store_true",
                        help="start afresh (shortcut for --set trainer.resume=never)")
    return parser.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> Config:
    path = args.config
    if path is None and Path("config.toml").is_file():
        path = "config.toml"
    overrides = list(args.overrides)
    if args.epochs is not None:
        overrides.append(f"trainer.max_epochs={args.epochs}")
    if args.no_resume:
        overrides.append('trainer.resume="never"')
    return load_config(path, overrides)


def local_or_url(location: str) -> str:
    """An fsspec URL as it is; a local path made absolute, so the run does not depend on the working directory."""
    return location if "://" in location else os.path.abspath(location)


def build_loggers(config: Config) -> list:
    tracking = config.tracking
    loggers = []
    if tracking.tracker in ("mlflow", "both"):
        from tracktrain_integrations.mlflow import MLflowLogger

        loggers.append(MLflowLogger(tracking_uri=tracking.mlflow_tracking_uri or None,
                                    experiment_name=tracking.experiment, run_name=tracking.run_name or None,
                                    log_system_metrics=tracking.mlflow_system_metrics,
                                    log_checkpoints=True))  # the run's checkpoints, as artifacts of its MLflow run
    if tracking.tracker in ("wandb", "both"):
        from tracktrain_integrations.wandb import WandbLogger

        loggers.append(WandbLogger(project=tracking.experiment, name=tracking.run_name or None,
                                   mode=tracking.wandb_mode))  # files in $WANDB_DIR, else under root_dir
    return loggers


def build_trainer(config: Config):
    from tracktrain import Trainer
    from tracktrain.callbacks import (ConfusionMatrixPlot, EarlyStopping, MetricPrinter, ModelCheckpoint, ModelSummary,
                                      TrainerProgressBar)

    from {{ cookiecutter.project_slug }}.data import NUM_CLASSES

    settings = config.trainer
    root_dir = local_or_url(config.run.root_dir)
    callbacks = [
        ModelCheckpoint(dirpath=local_or_url(config.run.checkpoint_dir), monitor="val_accuracy", mode="max",
                        save_top_k=1, save_last=True),
        MetricPrinter(),
        ModelSummary(max_depth=settings.model_summary_depth),  # layers, parameter counts and size, as a fit starts
    ]
    if settings.plots_every_n_epochs > 0:  # PNGs in root_dir/plots and in the tracker run's artifacts ("plots")
        callbacks.append(ConfusionMatrixPlot(num_classes=NUM_CLASSES, every_n_epochs=settings.plots_every_n_epochs))
    if settings.early_stopping_patience > 0:  # under DDP, one rank's stop is every rank's (agreed at the boundary)
        callbacks.append(EarlyStopping(monitor="val_accuracy", mode="max", patience=settings.early_stopping_patience))
    if settings.progress_bar == "always":
        callbacks.append(TrainerProgressBar(disable=False))  # also when the output is not a terminal
    loggers = build_loggers(config)
    return Trainer(
        max_epochs=settings.max_epochs,
        precision=settings.precision,
        strategy=settings.strategy,
        seed=settings.seed,
        deterministic=settings.deterministic,
        log_every_n_steps=settings.log_every_n_steps,
        resume=None if settings.resume == "never" else settings.resume,
        resume_with_changes=settings.resume_with_changes,
        enable_progress_bar=settings.progress_bar != "never",
        default_root_dir=root_dir,
        callbacks=callbacks,
        loggers=loggers if loggers else None,  # None: a CSV log under root_dir/lightning_logs
    )


@dataclasses.dataclass(frozen=True)
class FitResult:
    metrics: dict[str, float]  # the last value of everything logged
    global_step: int
    resumed_from: str | None  # the checkpoint this fit continued from, None when it started afresh
    best_checkpoint: str | None = None  # the best by val_accuracy kept so far


def fit(config: Config) -> FitResult:
    """Train as `config` says."""
    from {{ cookiecutter.project_slug }}.data import DigitsData
    from {{ cookiecutter.project_slug }}.module import Classifier

    data = DigitsData(config.data, seed=config.trainer.seed)
    trainer = build_trainer(config)
    trainer.fit(Classifier(config.model), data.train_dataloader(), data.val_dataloader())
    metrics = {name: float(value) for name, value in trainer.callback_metrics.items()}
    from tracktrain.callbacks import ModelCheckpoint

    best = next((callback.best_model_path for callback in trainer.callbacks if isinstance(callback, ModelCheckpoint)),
                None)
    return FitResult(metrics, trainer.global_step, trainer.ckpt_path, best)


def installed(command: str) -> str:
    """`command` as it is installed beside this interpreter (a virtual environment's bin/ is rarely on PATH), so a
    printed command works when pasted anywhere; the bare name when it is not there."""
    path = os.path.join(os.path.dirname(sys.executable), command)
    return path if os.path.exists(path) else command


def experiment_page(uri: str, config: Config) -> str:
    """The UI's page of this run's experiment, in its model-training view (MLflow 3's UI opens in its GenAI view
    unless the address asks for the other)."""
    try:
        from mlflow.tracking import MlflowClient

        experiment = MlflowClient(uri).get_experiment_by_name(config.tracking.experiment)
    except Exception:  # noqa: BLE001 - only a link: the UI's home page does too
        experiment = None
    return f"/#/experiments/{experiment.experiment_id}?workflowType=machine_learning" if experiment else "/"


def how_to_view(config: Config) -> list[str]:
    """The commands that show this run."""
    from tracktrain import storage

    root_dir = local_or_url(config.run.root_dir)
    lines = []
    if config.tracking.tracker in ("mlflow", "both"):
        uri = config.tracking.mlflow_tracking_uri
        if not uri:  # where MLflowLogger puts it by default; absolute, so the command works from any directory
            uri = f"sqlite:///{os.path.abspath(storage.local_dir(root_dir))}/mlflow.db"
        if uri.startswith(("http://", "https://")):
            lines.append(f"open the run in the MLflow UI: {uri.rstrip('/')}{experiment_page(uri, config)}")
        else:
            lines.append(f"open the run in the MLflow UI: {installed('mlflow')} ui --backend-store-uri {uri}  "
                         f"(then http://127.0.0.1:5000{experiment_page(uri, config)})")
    if config.tracking.tracker in ("wandb", "both") and config.tracking.wandb_mode == "offline":
        wandb_root = os.environ.get("WANDB_DIR") or storage.local_dir(root_dir)
        folder = os.path.abspath(os.path.join(wandb_root, "wandb"))
        runs = sorted(glob.glob(os.path.join(folder, "offline-run-*")), key=os.path.getmtime)
        # each start of a resumed run writes a folder of its own, all named after the one run id: sync them all
        run_id = runs[-1].rsplit("-", 1)[-1] if runs else ""
        lines.append(f"look at the W&B run in this terminal: {installed('wandb')} leet {folder}")
        lines.append(f"upload the W&B run: {installed('wandb')} sync {folder}/offline-run-*-{run_id or '*'}")
    return lines


def alone_unless_launched(config: Config, argv: Sequence[str]) -> None:
    """Under strategy "ddp" or "fsdp" without torchrun: describe a world of one process, as torchrun does for
    `--nproc_per_node 1`, and say in one line how to start more. The run trains at once, the way each of torchrun's
    processes would, rather than stopping with an error (Lightning runs `strategy="ddp"` on one device the same way)."""
    if config.trainer.strategy not in OVER_PROCESSES or "WORLD_SIZE" in os.environ:
        return  # no process group needed, or torchrun (or tracktrain.distributed.spawn) describes one
    # MASTER_PORT 0: the process group's store takes any free port, as no other process needs to find it
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT="0")
    import torch

    processes = torch.cuda.device_count() or 2
    command = shlex.join([installed("torchrun"), "--standalone", "--nproc_per_node", str(processes), "-m",
                          "{{ cookiecutter.project_slug }}.train", *argv])
    print(f"strategy={config.trainer.strategy!r} on 1 process, as torchrun did not start it; with torchrun (one "
          f"process per GPU, or 2 on a CPU): {command}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = config_from_args(args)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    alone_unless_launched(config, sys.argv[1:] if argv is None else list(argv))
    result = fit(config)
    from tracktrain.distributed.ranks import global_rank

    if global_rank() == 0:
        if result.resumed_from:
            print(f"resumed from {result.resumed_from}", flush=True)
        shown = ("train_loss_epoch", "val_loss", "val_accuracy")
        summary = "  ".join(f"{name} {result.metrics[name]:.4f}" for name in shown if name in result.metrics)
        if result.metrics:  # none when the run had already finished (the Trainer said so): nothing was trained
            print(f"final metrics after {result.global_step} steps: {summary}", flush=True)
        if result.best_checkpoint:
            print(f"best checkpoint (val_accuracy): {result.best_checkpoint}", flush=True)
        for line in how_to_view(config):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
