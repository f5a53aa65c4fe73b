"""`tracktrain`: the things users do around a run, from the terminal.

    tracktrain runs [ROOT]      the run under ROOT (default: ./runs): its checkpoints, who writes them, what waits
                                for an unreachable store, and its MLflow and W&B runs
    tracktrain inspect CKPT     what a checkpoint holds: step, epoch, module and hyperparameters, sizes, and whether
                                it is complete (its manifest and checksum)
    tracktrain ui [ROOT]        the MLflow UI on the run's own store (or how to look at its W&B runs)
    tracktrain fit ...          fit (validate, test, predict) any LoopModule and DataModule from config files and
                                dotted options: LightningCLI (tracktrain.cli) with subclass mode for the model and
                                the data, `tracktrain fit --help`
    tracktrain convert SRC DST  a sharded checkpoint (an FSDP run's `.dcp` directory) as one full-state file, for
                                export or inference; or a full one as a sharded one
    tracktrain trust DCP        give a sharded checkpoint written without a manifest (by another program) one, so that
                                it loads: your word that you trust where it came from (docs/security.md)

ROOT and CKPT are local paths or any fsspec URL. Here rather than in the core: it reads the trackers' stores.

`tracktrain fit | validate | test | predict` take LightningCLI's config (YAML or JSON; `--config` repeatable, later
files win; dotted options over them, `--print_config` prints the merged config with every default filled in):

    model:                       # or --model mypkg.MyModule, then --model.lr 0.1
      class_path: mypkg.MyModule
      init_args: {lr: 0.1}
    data:                        # optional: a DataModule (else the module's own *_dataloader() methods)
      class_path: mypkg.MyData
      init_args: {batch_size: 32}
    trainer:                     # Trainer(...)'s arguments; callbacks and loggers as class_path/init_args entries
      max_epochs: 5
      callbacks: [{class_path: tracktrain.callbacks.EarlyStopping, init_args: {monitor: val_loss}}]
    optimizer: null              # or {class_path: torch.optim.AdamW, init_args: {lr: 0.001}}: configure_optimizers
    lr_scheduler: null           # returns it (and this scheduler)
    ckpt_path: null              # fit: resume from it; validate/test/predict: the weights to use ("best", "last")
    seed_everything: true        # an int: seeded before the classes are built; true: a seed drawn and recorded

Every key is checked against the signature of the class it goes to before anything is built (an unknown key is an
error naming it). A fit writes the merged config to its `trainer.default_root_dir` as `config.yaml` (replacing the
one a run there wrote before: the same command resumes) and sends it to the trackers. Classes are found by import
path; the working directory is importable, as under `python -m`.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from tracktrain import storage
from tracktrain.checkpoint import lease
from tracktrain.checkpoint.discovery import committed_checkpoints
from tracktrain.checkpoint.manifest import CheckpointCorrupted, manifest_name, parse_manifest, write_manifest
from tracktrain.checkpoint.spool import Spool, spool_dir_for
from tracktrain.checkpoint.state import read_checkpoint

__all__ = ["main", "run_lightning_cli"]

COMMANDS = ("fit", "validate", "test", "predict")  # LightningCLI's subcommands


def main(argv: Sequence[str] | None = None) -> int:
    """The `tracktrain` command (`runs`, `inspect`, `ui`, `convert`, `trust`; `fit`, `validate`, `test`, `predict`:
    LightningCLI) on `argv` (default: `sys.argv[1:]`); returns the exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and arguments[0] in COMMANDS:  # their options are the config's keys: parsed by LightningCLI
        return run_lightning_cli(arguments)
    parser = argparse.ArgumentParser(prog="tracktrain", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        commands.add_parser(
            command,
            help=f"{command} any LoopModule from a config file and dotted options (tracktrain {command} --help)",
        )
    runs = commands.add_parser("runs", help="a run's checkpoints, writer and tracker runs")
    runs.add_argument("root", nargs="?", default="runs", help="the run's root directory or URL (default: runs)")
    inspect = commands.add_parser("inspect", help="what a checkpoint holds, and whether it is complete")
    inspect.add_argument("checkpoint", help="a checkpoint file's path or URL")
    convert = commands.add_parser(
        "convert", help="a sharded checkpoint (a .dcp directory) as one full-state file, or the other way"
    )
    convert.add_argument("source", help="the checkpoint: a sharded one's directory, or a file (path or URL)")
    convert.add_argument("target", help="what to write (path or URL), e.g. beside it: .../checkpoint_9.pt")
    trust = commands.add_parser(
        "trust", help="give a sharded checkpoint written by another program a manifest, so that it loads"
    )
    trust.add_argument("checkpoint", help="the sharded checkpoint's directory (path or URL)")
    ui = commands.add_parser("ui", help="open the run's MLflow UI (or say how to look at its W&B runs)")
    ui.add_argument("root", nargs="?", default="runs", help="the run's root directory (default: runs)")
    ui.add_argument("--port", type=int, default=5000)
    ui.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    try:
        if args.command == "runs":
            return show_runs(args.root)
        if args.command == "inspect":
            return inspect_checkpoint(args.checkpoint)
        if args.command == "convert":
            return convert_checkpoint(args.source, args.target)
        if args.command == "trust":
            return trust_checkpoint(args.checkpoint)
        return open_ui(args.root, args.host, args.port)
    except (FileNotFoundError, CheckpointCorrupted, ValueError, OSError) as error:
        print(f"tracktrain {args.command}: {error}", file=sys.stderr)
        return 2


# ----------------------------------------------------------------------------------- fit, validate, test, predict
def run_lightning_cli(arguments: Sequence[str]) -> int:
    """`tracktrain SUBCOMMAND OPTIONS...`: LightningCLI with any LoopModule and DataModule (subclass mode). A fit
    saves its merged config in its run directory, replacing the one an earlier start of the run wrote (the same
    command resumes a run, `trainer.resume: auto`); validate/test/predict keep the fit's there."""
    try:
        from tracktrain.cli import LightningCLI, SaveConfigCallback
    except ImportError as error:  # jsonargparse: the cli extra
        print(f"tracktrain {arguments[0]}: {error}", file=sys.stderr)
        return 2
    if os.getcwd() not in sys.path and "" not in sys.path:  # the user's classes, as under `python -m`
        sys.path.insert(0, os.getcwd())
    try:
        LightningCLI(
            save_config_callback=SaveConfigCallback if arguments[0] == "fit" else None,
            save_config_kwargs={"overwrite": True},
            parser_kwargs={"prog": "tracktrain"},
            args=list(arguments),
        )
    except SystemExit as exit:  # jsonargparse's: --help, --print_config (0), a bad config (2, said on stderr)
        return exit.code if isinstance(exit.code, int) else 0 if exit.code is None else 2
    return 0


# ------------------------------------------------------------------------------------------------------ runs
def show_runs(root: str) -> int:
    if not storage.exists(root):
        raise FileNotFoundError(
            f"No run at {root}: give the run's root directory (Trainer(default_root_dir=...), "
            "the template's run.root_dir), e.g. `tracktrain runs runs`."
        )
    directory = storage.join(root, "checkpoints")
    found, problems = committed_checkpoints(directory)
    print(f"checkpoints in {directory}:")
    for checkpoint in found:
        summary = checkpoint.manifest["summary"]
        size = sum(entry["bytes"] for entry in checkpoint.manifest["files"].values())
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(checkpoint.manifest["created"]))
        kind = "" if checkpoint.resumable else "  weights only"
        print(
            f"  {checkpoint.data_filename:<40} step {summary.get('global_step', '?'):>7}  epoch "
            f"{summary.get('epoch', '?'):>4}  {_size(size):>9}  {created}{kind}"
        )
    resumable = [checkpoint for checkpoint in found if checkpoint.resumable]
    if not resumable:
        weights = " (weights only: they load with load_from_checkpoint, a fit does not resume them)" if found else ""
        print(f"  none complete{weights}: a fit here starts a new run")
    for problem in problems:
        print(f"  not complete (skipped by resume): {problem}")
    if resumable:
        print(
            f'  resume="auto" continues from {resumable[0].data_filename}; '
            f"`tracktrain inspect {resumable[0].url}` shows what it holds"
        )
    print(f"writer: {lease.status(directory)}")
    spool = Spool(spool_dir_for(directory, root), directory)
    if not spool.is_empty:
        print(f"waiting for the store: {spool.behind()}")
    _show_mlflow_runs(root)
    _show_wandb_runs(root)
    return 0


def _show_mlflow_runs(root: str) -> None:
    database = os.path.join(os.path.abspath(storage.local_dir(root)), "mlflow.db")
    if not os.path.exists(database):
        return
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{database}")
    print(f"MLflow runs in sqlite:///{database} (open them: tracktrain ui {root}):")
    for experiment in client.search_experiments():
        for run in client.search_runs([experiment.experiment_id], order_by=["attributes.start_time DESC"]):
            steps = [
                metric.step
                for name in run.data.metrics
                for metric in client.get_metric_history(run.info.run_id, name)[-1:]
            ]
            print(
                f"  {experiment.name} / {run.info.run_name}  {run.info.status}  last step "
                f"{max(steps) if steps else '-'}  id {run.info.run_id}"
            )


def _show_wandb_runs(root: str) -> None:
    folder = os.path.join(os.path.abspath(storage.local_dir(root)), "wandb")
    folders = sorted(glob.glob(os.path.join(folder, "offline-run-*")))
    if not folders:
        return
    by_id: dict[str, list[str]] = {}
    for path in folders:
        by_id.setdefault(path.rsplit("-", 1)[-1], []).append(path)
    print(f"W&B offline runs in {folder} (look: wandb leet {folder}):")
    for run_id, paths in by_id.items():
        print(
            f"  run {run_id}: {len(paths)} folder{'s' if len(paths) > 1 else ''}; upload: wandb sync "
            f"{folder}/offline-run-*-{run_id}"
        )


# --------------------------------------------------------------------------------------------------- inspect
def inspect_checkpoint(url: str) -> int:
    directory, _, name = url.replace(os.sep, "/").rpartition("/")
    manifest_url = storage.join(directory or ".", manifest_name(name))
    complete = True
    try:
        manifest = parse_manifest(storage.read_bytes(manifest_url), manifest_url)
        files = ", ".join(f"{file} {_size(entry['bytes'])}" for file, entry in manifest["files"].items())
        print(f"manifest: valid ({files})")
    except FileNotFoundError:
        if not storage.exists(url):
            raise FileNotFoundError(
                f"No checkpoint at {url}. `tracktrain runs ROOT` lists the checkpoints of the run under ROOT."
            ) from None
        complete = False
        print(
            "manifest: none — not a committed checkpoint (a save cut short, or one written without a manifest); "
            'resume="auto" never takes it'
        )
    except CheckpointCorrupted as error:
        complete = False
        print(f"manifest: not valid — {error}")
    states = read_checkpoint(url)  # checks the content against the manifest's size and SHA-256
    print(f"content: {'matches its manifest' if complete else 'read (nothing to check it against)'}")
    trainer = states.get("trainer") or {} if isinstance(states, dict) else {}
    engine = states.get("train_engine") or {} if isinstance(states, dict) else {}
    if trainer.get("weights_only"):
        print(
            f"weights only (ModelCheckpoint(save_weights_only=True)), step {trainer.get('global_step')}, epoch "
            f"{trainer.get('epoch')}: loads with load_from_checkpoint; a fit does not resume from it"
        )
    elif trainer:
        print(
            f"step {trainer.get('global_step')}, iteration {engine.get('iteration')}, epoch length "
            f"{engine.get('epoch_length')}, samples seen {trainer.get('samples_seen')}"
        )
        settings = trainer.get("settings") or {}
        if settings:
            print(f"module: {settings.get('module/class')}")
            for label, section in (("hyperparameters", "module"), ("trainer", "trainer")):
                values = settings.get(section) or {}
                if values:
                    print(f"{label}: " + ", ".join(f"{key}={value!r}" for key, value in values.items()))
    if isinstance(states, dict):
        print("objects:")
        for key, value in states.items():
            print(f"  {key}: {_describe_state(value)}")
    return 0 if complete else 1


# --------------------------------------------------------------------------------------------------- convert
def convert_checkpoint(source: str, target: str) -> int:
    """A sharded checkpoint `source` (a directory) as one torch.save file `target`, or a full checkpoint file as a
    sharded one (each rank of an FSDP run then reads just its part). `target` is committed with a manifest (the
    source's summary), so that `resume="auto"` and `tracktrain runs` find it too."""
    import io

    import torch

    from tracktrain.checkpoint.sharded import is_sharded_checkpoint
    from tracktrain.checkpoint.sharded_saver import write_sharded

    if storage.exists(target):
        raise FileExistsError(f"{target} already exists: remove it first, or choose another name.")
    states = dict(read_checkpoint(source))  # checked against its manifest; a sharded one read whole
    source_directory, source_name = storage.split(source)
    summary: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    manifest_url = storage.join(source_directory, manifest_name(source_name))
    if storage.exists(manifest_url):
        manifest = parse_manifest(storage.read_bytes(manifest_url), manifest_url)
        summary, metadata = manifest["summary"], manifest["metadata"]
    if not is_sharded_checkpoint(source):
        write_sharded(states, target, summary, metadata)
        print(
            f"Wrote {target}: {source} as a sharded checkpoint. Under strategy='fsdp' each rank reads its own part "
            "(fit(ckpt_path=...)); on one device it loads whole (Checkpoint.load_objects)."
        )
        return 0
    buffer = io.BytesIO()
    torch.save(states, buffer)
    data = buffer.getbuffer()
    directory, name = storage.split(target)
    storage.write_bytes_atomic(target, data)
    write_manifest(directory, {name: data}, summary, metadata)
    print(
        f"Wrote {target} ({_size(len(data))}): the full state of {source}. It loads with "
        "Checkpoint.load_objects(...) or torch.load(..., weights_only=True), and resumes a fit on any number of "
        "ranks (fit(ckpt_path=...))."
    )
    return 0


# ----------------------------------------------------------------------------------------------------- trust
def trust_checkpoint(url: str) -> int:
    from tracktrain.checkpoint.sharded import trust

    manifest_url = trust(url)
    print(
        f"Wrote {manifest_url}: {url} is trusted as it is now. It loads like a checkpoint tracktrain committed, "
        "checked against this manifest (a file changed from now on is refused), and is still read as plain data only."
    )
    return 0


def _describe_state(value: Any) -> str:
    import torch

    tensors = []

    def collect(item: Any) -> None:
        if isinstance(item, torch.Tensor):
            tensors.append(item)
        elif isinstance(item, dict):
            for inner in item.values():
                collect(inner)
        elif isinstance(item, (list, tuple)):
            for inner in item:
                collect(inner)

    collect(value)
    if not tensors:
        return f"{type(value).__name__} without tensors"
    elements = sum(tensor.numel() for tensor in tensors)
    size = sum(tensor.numel() * tensor.element_size() for tensor in tensors)
    return f"{len(tensors)} tensors, {elements:,} values, {_size(size)}"


# ------------------------------------------------------------------------------------------------------- ui
def open_ui(root: str, host: str, port: int) -> int:
    local = os.path.abspath(storage.local_dir(root))
    database = os.path.join(local, "mlflow.db")
    if os.path.exists(database):
        mlflow = os.path.join(os.path.dirname(sys.executable), "mlflow")
        command = [
            mlflow if os.path.exists(mlflow) else "mlflow",
            "ui",
            "--backend-store-uri",
            f"sqlite:///{database}",
            "--host",
            host,
            "--port",
            str(port),
        ]
        print(f"MLflow UI of {root}: http://{host}:{port}  (Ctrl-C stops it)", flush=True)
        from mlflow.tracking import MlflowClient

        for experiment in MlflowClient(f"sqlite:///{database}").search_experiments():
            if experiment.name != "Default":  # in its model-training view: MLflow 3's UI opens in its GenAI view
                print(
                    f"  {experiment.name}: http://{host}:{port}/#/experiments/{experiment.experiment_id}"
                    "?workflowType=machine_learning",
                    flush=True,
                )
        os.execvp(command[0], command)
    wandb_folder = os.path.join(local, "wandb")
    if os.path.isdir(wandb_folder):
        print(
            f"{root} has W&B runs, no MLflow store: look at them with `wandb leet {wandb_folder}`, or upload them "
            f"with `wandb sync {wandb_folder}/offline-run-*`."
        )
        return 0
    raise FileNotFoundError(
        f"No tracker store under {local} (no mlflow.db, no wandb folder): was the run tracked? "
        f"`tracktrain runs {root}` shows what it has."
    )


def _size(size: int) -> str:
    if size < 1000:
        return f"{size} bytes"
    return f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size / 1e3:.1f} kB"


if __name__ == "__main__":
    sys.exit(main())
