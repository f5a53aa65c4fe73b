"""Train: `python -m {{ cookiecutter.project_slug }}.train [--config FILE] [--trainer.max_epochs 20 --model.lr 0.1 ...]`.

The settings are LightningCLI's (`tracktrain.cli`, on jsonargparse): the packaged `config.yaml` beside this file, then
`./config.yaml` when there is one, then each `--config FILE`, then the dotted options; `--print_config` prints the
merged config and `--help` every option. Resumes by default: run the same command again after a crash or Ctrl-C and
it continues from the newest complete checkpoint, in the same tracker run. Under DDP: `torchrun --standalone
--nproc_per_node 2 -m {{ cookiecutter.project_slug }}.train --trainer.strategy ddp`; without torchrun, strategy "ddp"
or "fsdp" trains as a world of one process.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import shlex
import sys
from collections.abc import Sequence
from importlib import resources
from typing import Any

from tracktrain.callbacks import ModelCheckpoint
from tracktrain.cli import LightningArgumentParser, LightningCLI

from {{ cookiecutter.project_slug }}.data import DigitsData
from {{ cookiecutter.project_slug }}.module import Classifier

OVER_PROCESSES = ("ddp", "fsdp")  # the strategies over the processes torchrun starts (or a world of one without it)
PROGRAM = "python -m {{ cookiecutter.project_slug }}.train"


def packaged_config() -> str:
    """The path of the packaged defaults, `config.yaml` beside this module."""
    return str(resources.files(__package__).joinpath("config.yaml"))


def default_config() -> dict[str, Any]:
    """The packaged defaults, as nested dicts."""
    import yaml

    with open(packaged_config(), encoding="utf-8") as file:
        return yaml.safe_load(file)


def local_or_url(location: str) -> str:
    """An fsspec URL as it is; a local path made absolute, so the run does not depend on the working directory."""
    return location if "://" in location else os.path.abspath(location)


def _seed(seed: Any) -> int | None:
    """`seed_everything` as the Trainer's seed: an int as it is (True, a drawn seed, and False: none)."""
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def _split_seed(seed: Any) -> int:
    return _seed(seed) or 0


class TrainCLI(LightningCLI):
    """LightningCLI for this project: the Classifier, the digits, a `checkpoint:` group (the ModelCheckpoint every run
    has, where resume finds its checkpoints), and `seed_everything` as the Trainer's and the data split's seed."""

    def __init__(self, args: Sequence[str] | None = None, **kwargs: Any) -> None:
        self.arguments = list(sys.argv[1:] if args is None else args)  # for the torchrun command it may print
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})  # the same command resumes the run it saved
        defaults = [packaged_config(), "config.yaml"]  # the packaged config, then ./config.yaml when there is one
        super().__init__(
            Classifier,
            DigitsData,
            run=False,  # this module fits (below): `python -m {{ cookiecutter.project_slug }}.train` trains, no subcommand
            parser_kwargs={"prog": kwargs.pop("prog", PROGRAM), "default_config_files": defaults},
            args=None if args is None else list(args),
            **kwargs,
        )

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        # one seed: the model's first weights (seed_everything), the data order (the Trainer's) and the split
        parser.link_arguments("seed_everything", "trainer.seed", compute_fn=_seed)
        parser.link_arguments("seed_everything", "data.seed", compute_fn=_split_seed)

    def before_instantiate_classes(self) -> None:
        config = self.config
        strategy, location = config.trainer.strategy, str(config.checkpoint.dirpath)
        if strategy in OVER_PROCESSES and location.startswith("memory://"):
            self.parser.error(
                f"checkpoint.dirpath {location!r} lives in one process's memory, which the processes of "
                f"trainer.strategy={strategy!r} do not share (nor does the next command, the one that resumes): use a "
                "local path or an object store URL (s3://bucket/prefix)."
            )
        config.checkpoint.dirpath = local_or_url(location)
        config.trainer.default_root_dir = local_or_url(str(config.trainer.default_root_dir))
        alone_unless_launched(strategy, self.arguments)


@dataclasses.dataclass(frozen=True)
class FitResult:
    metrics: dict[str, float]  # the last value of everything logged
    global_step: int
    resumed_from: str | None  # the checkpoint this fit continued from, None when it started afresh
    best_checkpoint: str | None = None  # the best by val_accuracy kept so far


def fit(cli: TrainCLI) -> FitResult:
    """Train what `cli` built."""
    trainer = cli.trainer
    trainer.fit(cli.model, datamodule=cli.datamodule)
    metrics = {name: float(value) for name, value in trainer.callback_metrics.items()}
    best = next((callback.best_model_path for callback in trainer.callbacks if isinstance(callback, ModelCheckpoint)),
                None)
    return FitResult(metrics, trainer.global_step, trainer.ckpt_path, best)


def installed(command: str) -> str:
    """`command` as it is installed beside this interpreter (a virtual environment's bin/ is rarely on PATH), so a
    printed command works when pasted anywhere; the bare name when it is not there."""
    path = os.path.join(os.path.dirname(sys.executable), command)
    return path if os.path.exists(path) else command


def experiment_page(uri: str, experiment_name: str) -> str:
    """The UI's page of this run's experiment, in its model-training view (MLflow 3's UI opens in its GenAI view
    unless the address asks for the other)."""
    try:
        from mlflow.tracking import MlflowClient

        experiment = MlflowClient(uri).get_experiment_by_name(experiment_name)
    except Exception:  # noqa: BLE001 - only a link: the UI's home page does too
        experiment = None
    return f"/#/experiments/{experiment.experiment_id}?workflowType=machine_learning" if experiment else "/"


def how_to_view(trainer) -> list[str]:
    """The commands that show the run of `trainer` in its trackers."""
    from tracktrain import storage

    lines = []
    for logger in trainer.loggers:
        if logger.tracker == "mlflow":
            uri = logger.tracking_uri  # where MLflowLogger put it by default: absolute, works from any directory
            uri = uri or f"sqlite:///{os.path.abspath(storage.local_dir(trainer.default_root_dir))}/mlflow.db"
            page = experiment_page(uri, logger.experiment_name)
            if uri.startswith(("http://", "https://")):
                lines.append(f"open the run in the MLflow UI: {uri.rstrip('/')}{page}")
            else:
                lines.append(f"open the run in the MLflow UI: {installed('mlflow')} ui --backend-store-uri {uri}  "
                             f"(then http://127.0.0.1:5000{page})")
        elif logger.tracker == "wandb" and logger.mode in (None, "offline"):
            wandb_root = os.environ.get("WANDB_DIR") or storage.local_dir(trainer.default_root_dir)
            folder = os.path.abspath(os.path.join(wandb_root, "wandb"))
            runs = sorted(glob.glob(os.path.join(folder, "offline-run-*")), key=os.path.getmtime)
            # each start of a resumed run writes a folder of its own, all named after the one run id: sync them all
            run_id = runs[-1].rsplit("-", 1)[-1] if runs else ""
            lines.append(f"look at the W&B run in this terminal: {installed('wandb')} leet {folder}")
            lines.append(f"upload the W&B run: {installed('wandb')} sync {folder}/offline-run-*-{run_id or '*'}")
    return lines


def alone_unless_launched(strategy: str, argv: Sequence[str]) -> None:
    """Under strategy "ddp" or "fsdp" without torchrun: describe a world of one process, as torchrun does for
    `--nproc_per_node 1`, and say in one line how to start more. The run trains at once, the way each of torchrun's
    processes would, rather than stopping with an error (Lightning runs `strategy="ddp"` on one device the same way)."""
    if strategy not in OVER_PROCESSES or "WORLD_SIZE" in os.environ:
        return  # no process group needed, or torchrun (or tracktrain.distributed.spawn) describes one
    # MASTER_PORT 0: the process group's store takes any free port, as no other process needs to find it
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT="0")
    import torch

    processes = torch.cuda.device_count() or 2
    command = shlex.join([installed("torchrun"), "--standalone", "--nproc_per_node", str(processes), "-m",
                          "{{ cookiecutter.project_slug }}.train", *argv])
    print(f"strategy={strategy!r} on 1 process, as torchrun did not start it; with torchrun (one "
          f"process per GPU, or 2 on a CPU): {command}", flush=True)


def build(cli_class: type[TrainCLI], argv: Sequence[str] | None, **kwargs: Any) -> TrainCLI | int:
    """The CLI built from `argv` (default: the command line), or the exit status when it stopped: `--help` and
    `--print_config` (0), a bad setting (2, said on stderr: the key, the value, what is valid)."""
    try:
        return cli_class(argv, **kwargs)
    except SystemExit as exit:
        return exit.code if isinstance(exit.code, int) else 0 if exit.code is None else 2
    except ValueError as error:  # a value a class refused when built (Trainer(strategy="dp"), data.batch_size 0)
        print(f"error: {error}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    cli = build(TrainCLI, argv)
    if isinstance(cli, int):
        return cli
    result = fit(cli)
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
        for line in how_to_view(cli.trainer):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
