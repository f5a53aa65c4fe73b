#!/usr/bin/env python
"""Training throughput of `Trainer.fit` while the module logs 5 metrics at every step, with each tracker's logger
next to no logger at all, and Lightning's `MLFlowLogger` next to Lightning without a logger, in the same run.

The module logs `self.log_dict({...5 scalars...})` in every training step and the Trainer publishes them at every
step (`log_every_n_steps=1`); no progress bar, no checkpoints. Variants, all in one process:

- tracktrain: no logger (`loggers=False`, the baseline), `CSVLogger`, `MLflowLogger` on an embedded `sqlite:///`
  file, `MLflowLogger` on a local `mlflow server` (started here on 127.0.0.1 with a sqlite backend, stopped by its
  PID at the end), `WandbLogger` in offline mode (every W&B folder in a temporary directory); the MLflow and W&B
  loggers with their default `delivery="process"` (their tracker client in a child process), and with
  `--thread-delivery` also with `delivery="thread"` (in a thread of the training process);
- Lightning: no logger (its own baseline), and its `MLFlowLogger` as shipped on the same sqlite file and on the
  same server.

One sample is one fit's iterations per second from the start of its second epoch to the end of its last
iteration, read inside the loop (tracktrain: handlers on `trainer.train_engine`; Lightning: a callback): start-up
and the first epoch stay out, and so does the end of the fit, where a logger delivers what is still queued and
closes its run; that end is reported apart. The project's goal: with a tracktrain logger, at least **0.95 ×** the
no-logger throughput at every-step logging. After the timing, every run is read back (MlflowClient, the CSV file,
W&B's `wandb leet inspect --json`): each of the 5 metrics must have arrived at every step.

    .venv/bin/python benchmarks/bench_logging.py --quick      # smoke test, ~30 s
    .venv/bin/python benchmarks/bench_logging.py              # the real run, ~2.5 min on 2 cores

Timing never makes this script fail. It exits with status 1 only when a sanity check fails: a fit took the wrong
number of steps, trained other weights than the first fit, or a run is missing a metric value at some step, was
not closed, or left records undelivered. See benchmarks/README.md for how to read the table.
"""

from __future__ import annotations

import argparse
import atexit
import cProfile
import csv
import functools
import gc
import importlib.util
import json
import os
import pstats
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from _common import (
    STATISTICS, EngineClock, environment, exit_status, format_cell, goal_line, make_mlp, print_heading, quartiles,
    silence_lightning, write_json,
)
from _modules import LEARNING_RATE
from tracktrain import LoopModule
from tracktrain.trainer import Trainer
from tracktrain_integrations.testing import MlflowServer

TRACKTRAIN, LIGHTNING = "tracktrain", "lightning"
GOAL_RATIO = 0.95  # the "at least 0.95× the no-logger throughput at every-step logging"
METRIC_NAMES = ("loss", "accuracy", "logit_mean", "logit_std", "logit_max")
MODEL = (256, 512, 512, 10)
WANDB_FOLDERS = ("WANDB_DIR", "WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR")


# ------------------------------------------------------------------------------------------- the modules
def five_metrics(logits: torch.Tensor, targets: torch.Tensor, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    """What both modules log at every step: 0-d tensors (each framework reads them when it publishes)."""
    logits = logits.detach()
    return {
        "loss": loss.detach(),
        "accuracy": (logits.argmax(dim=1) == targets).float().mean(),
        "logit_mean": logits.mean(),
        "logit_std": logits.std(),
        "logit_max": logits.max(),
    }


class LoggingClassifier(LoopModule):
    """Cross-entropy classifier that logs the 5 metrics in every training step."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def train_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self.net(x)
        loss = F.cross_entropy(logits, y)
        self.log_dict(five_metrics(logits, y, loss))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=LEARNING_RATE)


def lightning_classes(lightning: Any) -> tuple[type, type]:
    """Lightning's module, line for line `LoggingClassifier`, and its clock (defined once Lightning is imported)."""

    class LightningLoggingClassifier(lightning.LightningModule):
        def __init__(self, net: nn.Module) -> None:
            super().__init__()
            self.net = net

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            logits = self.net(x)
            loss = F.cross_entropy(logits, y)
            self.log_dict(five_metrics(logits, y, loss))
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=LEARNING_RATE)

    class LightningClock(lightning.Callback):
        """Reads the clock and the step when the second epoch starts and when training ends (after the last
        iteration's logging, before the loggers are finalized)."""

        def __init__(self) -> None:
            self.start = self.end = 0.0
            self.start_step = 0

        def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
            if trainer.current_epoch == 1:
                self.start, self.start_step = time.perf_counter(), trainer.global_step

        def on_train_end(self, trainer: Any, module: Any) -> None:
            self.end = time.perf_counter()

    return LightningLoggingClassifier, LightningClock


# ------------------------------------------------------------------------------------------------ setup
class Workload:
    """The MLP's initial weights and a DataLoader over a synthetic in-memory TensorDataset (in order, no workers):
    every fit trains a fresh copy of the same weights on the same batches."""

    def __init__(self, batch_size: int, batches_per_epoch: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        samples = batch_size * batches_per_epoch
        inputs = torch.randn(samples, MODEL[0], generator=generator)
        targets = torch.randint(0, MODEL[-1], (samples,), generator=generator)
        self.batch_size = batch_size
        self.batches_per_epoch = batches_per_epoch
        self.loader = DataLoader(TensorDataset(inputs, targets), batch_size=batch_size)
        torch.manual_seed(seed)
        self._initial = {name: value.clone() for name, value in make_mlp(MODEL).state_dict().items()}

    def fresh_net(self) -> nn.Sequential:
        net = make_mlp(MODEL)
        net.load_state_dict(self._initial)
        return net

    def describe(self) -> str:
        return (f"MLP {'-'.join(map(str, MODEL))}, cross-entropy, SGD, batch {self.batch_size}, DataLoader over a "
                f"TensorDataset, {self.batches_per_epoch} batches/epoch")


@dataclass
class Delivery:
    """Where a fit's logged values went, to be read back after the timing: `kind` is "csv" (location: the
    metrics.csv file), "mlflow" (location: the tracking URI) or "wandb" (location: the offline run's folder)."""

    kind: str
    location: str
    run_id: str | None = None
    undelivered: int = 0  # records the logger says it could not deliver (tracktrain's loggers)


@dataclass
class Fit:
    """One fit: `seconds` and `timed_steps` from the start of its second epoch to its last iteration; `tail_seconds`
    from there to the return of `fit` (the loggers deliver what is queued and close their runs)."""

    seconds: float
    timed_steps: int
    steps: int
    tail_seconds: float
    net: nn.Module
    delivery: Delivery | None = None

    @property
    def iterations_per_second(self) -> float:
        return self.timed_steps / self.seconds


@dataclass
class Variant:
    """`fit(workload, epochs, run_dir)` trains a fresh copy of the network with this variant's logger."""

    key: str
    framework: str
    logger: str  # as shown in the table
    fit: Callable[[Workload, int, str], Fit]
    needs_server: bool = False

    @property
    def is_baseline(self) -> bool:
        return self.logger == "none"


# ------------------------------------------------------------------------------------------- the trackers
@dataclass
class Trackers:
    """Where the trackers live in this run: the sqlite URI every MLflow variant on the embedded file shares, the
    server (when a variant needs it), W&B's folders."""

    root_dir: str
    sqlite_uri: str
    server: MlflowServer | None = None

    @property
    def server_uri(self) -> str:
        if self.server is None:
            raise RuntimeError("no mlflow server was started")
        return self.server.url


def quiet_trackers(root_dir: str) -> None:
    """Set before the trackers are imported. W&B: offline and silent, every folder it writes (data, cache, config)
    under `root_dir`, and a base URL where nothing listens, so that no traffic leaves the machine. MLflow: warnings
    only (not its database creation and migration), and no "View run at" links printed when a run on the server
    ends (which also spares set_terminated one get_run, at the end of the fit, outside the timing)."""
    for variable in WANDB_FOLDERS:
        folder = os.path.join(root_dir, variable.lower())
        os.makedirs(folder, exist_ok=True)
        os.environ[variable] = folder
    os.environ.pop("WANDB_API_KEY", None)
    os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_BASE_URL="http://127.0.0.1:9")
    os.environ.update(MLFLOW_LOGGING_LEVEL="WARNING", MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT="true")


# ------------------------------------------------------------------------------------------------ variants
def tracktrain_fitter(make_logger: Callable[[str], Any] | None) -> Callable[[Workload, int, str], Fit]:
    """A fit of the Trainer with the logger `make_logger(run_dir)` builds (none when None)."""

    def fit(workload: Workload, epochs: int, run_dir: str) -> Fit:
        logger = make_logger(run_dir) if make_logger is not None else None
        trainer = Trainer(
            max_epochs=epochs, log_every_n_steps=1, enable_progress_bar=False, enable_checkpointing=False,
            loggers=[logger] if logger is not None else False, default_root_dir=run_dir, accelerator="cpu",
        )
        clock = EngineClock(trainer)
        net = workload.fresh_net()
        trainer.fit(LoggingClassifier(net), workload.loader)
        returned = time.perf_counter()
        return Fit(clock.end - clock.start, trainer.global_step - clock.start_iteration, trainer.global_step,
                   returned - clock.end, net, tracktrain_delivery(logger))

    return fit


def tracktrain_delivery(logger: Any) -> Delivery | None:
    if logger is None:
        return None
    undelivered = getattr(logger, "undelivered", 0)
    if logger.name == "csv":
        return Delivery("csv", os.path.join(logger.run_dir, "metrics.csv"), logger.run_id)
    if logger.name == "mlflow":
        return Delivery("mlflow", logger.tracking_uri, logger.run_id, undelivered)
    if logger.name == "wandb":
        return Delivery("wandb", logger.run_dir, logger.run_id, undelivered)
    raise ValueError(f"no read-back for logger {logger.name!r}")


def lightning_fitter(lightning: Any, tracking_uri: Callable[[], str] | None) -> Callable[[Workload, int, str], Fit]:
    """A fit of Lightning's Trainer with its `MLFlowLogger` on `tracking_uri()` (no logger when None)."""
    module_class, clock_class = lightning_classes(lightning)

    def fit(workload: Workload, epochs: int, run_dir: str) -> Fit:
        logger = uri = None
        if tracking_uri is not None:
            from lightning.pytorch.loggers import MLFlowLogger

            uri = tracking_uri()
            logger = MLFlowLogger("bench-lightning", tracking_uri=uri)
        clock = clock_class()
        trainer = lightning.Trainer(
            max_epochs=epochs, log_every_n_steps=1, enable_progress_bar=False, enable_checkpointing=False,
            enable_model_summary=False, logger=logger if logger is not None else False, callbacks=[clock],
            accelerator="cpu", devices=1, num_sanity_val_steps=0, default_root_dir=run_dir,
        )
        net = workload.fresh_net()
        trainer.fit(module_class(net), train_dataloaders=workload.loader)
        returned = time.perf_counter()
        delivery = Delivery("mlflow", uri, logger.run_id) if logger is not None else None
        return Fit(clock.end - clock.start, trainer.global_step - clock.start_step, trainer.global_step,
                   returned - clock.end, net, delivery)

    return fit


def make_variants(trackers: Trackers, lightning: Any, available: dict[str, bool],
                  thread_delivery: bool = False) -> list[Variant]:
    """Every variant whose libraries are installed; the mlflow and wandb loggers are imported here, lazily. With
    `thread_delivery`, tracktrain's MLflow and W&B loggers also run with `delivery="thread"` (keys ending -thread)."""
    from tracktrain.loggers import CSVLogger

    variants = [
        Variant("tracktrain/none", TRACKTRAIN, "none", tracktrain_fitter(None)),
        Variant("tracktrain/csv", TRACKTRAIN, "CSVLogger", tracktrain_fitter(lambda run_dir: CSVLogger(run_dir))),
    ]
    deliveries = [("", None), ("-thread", "thread")] if thread_delivery else [("", None)]
    if available["mlflow"]:
        from tracktrain_integrations.mlflow import MLflowLogger

        for suffix, delivery in deliveries:
            shown = f", delivery={delivery!r}" if delivery else ""
            options = {"experiment_name": "bench-tracktrain", **({"delivery": delivery} if delivery else {})}
            variants += [
                Variant(f"tracktrain/mlflow-sqlite{suffix}", TRACKTRAIN, f"MLflowLogger, embedded sqlite{shown}",
                        tracktrain_fitter(lambda run_dir, o=options: MLflowLogger(tracking_uri=trackers.sqlite_uri,
                                                                                  **o))),
                Variant(f"tracktrain/mlflow-server{suffix}", TRACKTRAIN, f"MLflowLogger, local server{shown}",
                        tracktrain_fitter(lambda run_dir, o=options: MLflowLogger(tracking_uri=trackers.server_uri,
                                                                                  **o)),
                        needs_server=True),
            ]
    if available["wandb"]:
        from tracktrain_integrations.wandb import WandbLogger

        for suffix, delivery in deliveries:
            shown = f", delivery={delivery!r}" if delivery else ""
            variants.append(Variant(
                f"tracktrain/wandb-offline{suffix}", TRACKTRAIN, f"WandbLogger, offline{shown}", tracktrain_fitter(
                    lambda run_dir, d=delivery: WandbLogger(project="bench-logging", mode="offline", save_dir=run_dir,
                                                            delivery=d))))
    if lightning is not None:
        variants.append(Variant("lightning/none", LIGHTNING, "none", lightning_fitter(lightning, None)))
        if available["mlflow"]:
            variants += [
                Variant("lightning/mlflow-sqlite", LIGHTNING, "MLFlowLogger, embedded sqlite",
                        lightning_fitter(lightning, lambda: trackers.sqlite_uri)),
                Variant("lightning/mlflow-server", LIGHTNING, "MLFlowLogger, local server",
                        lightning_fitter(lightning, lambda: trackers.server_uri), needs_server=True),
            ]
    return variants


def select(variants: list[Variant], wanted: str | None) -> list[Variant]:
    """The variants whose key contains one of the comma-separated `wanted` words, plus each framework's baseline."""
    if not wanted:
        return variants
    words = [word for word in wanted.split(",") if word]
    chosen = [variant for variant in variants if any(word in variant.key for word in words)]
    frameworks = {variant.framework for variant in chosen}
    return [variant for variant in variants
            if variant in chosen or (variant.is_baseline and variant.framework in frameworks)]


# ------------------------------------------------------------------------------------------------- checks
def weights(net: nn.Module) -> list[torch.Tensor]:
    return [value.detach().clone() for value in net.state_dict().values()]


@dataclass
class Measurement:
    """What the fits of one run of the script share: the workload, the reference weights (the first fit's), and
    what was logged where, read back after the timing."""

    workload: Workload
    epochs: int
    reference: list[torch.Tensor] | None = None
    deliveries: dict[str, list[Delivery]] = field(default_factory=dict)  # variant key -> one per fit

    @property
    def steps(self) -> int:
        return self.epochs * self.workload.batches_per_epoch

    @property
    def timed_steps(self) -> int:
        return (self.epochs - 1) * self.workload.batches_per_epoch


def check_fit(measurement: Measurement, variant: Variant, fit: Fit, problems: list[str]) -> None:
    """After every fit, outside the timing: the steps, and the weights (logging must not change training: every fit
    does the same arithmetic as the first, bit for bit with one thread; the tolerance is for other counts)."""
    if fit.steps != measurement.steps or fit.timed_steps != measurement.timed_steps:
        problems.append(f"{variant.key}: took {fit.steps} steps ({fit.timed_steps} timed), expected "
                        f"{measurement.steps} ({measurement.timed_steps} timed)")
    trained = weights(fit.net)
    if measurement.reference is None:
        measurement.reference = trained
    elif not all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(trained, measurement.reference)):
        problems.append(f"{variant.key}: the trained weights differ from the first fit's")
    if fit.delivery is not None:
        measurement.deliveries.setdefault(variant.key, []).append(fit.delivery)
        if fit.delivery.undelivered:
            problems.append(f"{variant.key}: {fit.delivery.undelivered} records left undelivered at the end of the fit")


def read_back(delivery: Delivery) -> tuple[dict[str, set[int]], str]:
    """The steps at which each metric arrived in the tracker, and the run's final state as the tracker has it."""
    if delivery.kind == "csv":
        steps: dict[str, set[int]] = {}
        with open(delivery.location, newline="", encoding="utf-8") as rows:
            for row in csv.DictReader(rows):
                steps.setdefault(row["name"], set()).add(int(row["step"]))
        with open(os.path.join(os.path.dirname(delivery.location), "status.txt"), encoding="utf-8") as status:
            return steps, status.read().strip()
    if delivery.kind == "mlflow":
        from mlflow.tracking import MlflowClient

        client = MlflowClient(delivery.location)
        steps = {}
        for name in METRIC_NAMES:
            history = client.get_metric_history(delivery.run_id, name)
            steps[name] = {metric.step for metric in history}
            if len(history) != len(steps[name]):
                steps[name].add(-len(history))  # repeats at one step: the count check below sees them
        return steps, client.get_run(delivery.run_id).info.status
    if delivery.kind == "wandb":
        # W&B's own reader of the offline run's transaction log, as tests/integrations/test_wandb.py reads it
        result = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", delivery.location],
                                capture_output=True, text=True, timeout=120, check=True)
        records = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
        steps = {}
        for record in records:
            if record["type"] == "history":
                item = record["history"]["item"]
                for name in METRIC_NAMES:
                    if name in item:
                        steps.setdefault(name, set()).add(int(item["_step"]))
        exits = [record["exit"].get("exit_code", 0) for record in records if record["type"] == "exit"]
        return steps, "FINISHED" if exits == [0] else f"exit records {exits}"
    raise ValueError(f"unknown delivery kind {delivery.kind!r}")


def verify_deliveries(measurement: Measurement, problems: list[str]) -> dict[str, dict[str, Any]]:
    """Per variant with a logger: how many of its runs hold every metric at every step of the fit, closed as
    FINISHED. Each miss is a problem (that is what makes the script exit 1)."""
    verified: dict[str, dict[str, Any]] = {}
    for key, deliveries in measurement.deliveries.items():
        complete = 0
        for index, delivery in enumerate(deliveries):
            where = f"{key} run {delivery.run_id} (fit {index + 1} of {len(deliveries)})"
            try:
                steps, status = read_back(delivery)
            except Exception as error:  # a run that cannot be read back is as bad as one that is missing values
                problems.append(f"{where}: could not be read back: {type(error).__name__}: {error}")
                continue
            counts = {name: len(steps.get(name, ())) for name in METRIC_NAMES}
            distinct = {len(values) for values in steps.values()}
            missing = {name: count for name, count in counts.items() if count != measurement.steps}
            if missing or distinct != {measurement.steps}:
                problems.append(f"{where}: expected each of {list(METRIC_NAMES)} at {measurement.steps} distinct "
                                f"steps, found {counts}")
            elif status != "FINISHED":
                problems.append(f"{where}: the run ended as {status!r}, not FINISHED")
            else:
                complete += 1
        verified[key] = {"runs": len(deliveries), "complete_runs": complete, "values_per_metric": measurement.steps}
    return verified


# ----------------------------------------------------------------------------------------------- measuring
def run_fit(measurement: Measurement, variant: Variant, root_dir: str, threads: int, problems: list[str]) -> Fit:
    run_dir = tempfile.mkdtemp(prefix=variant.key.replace("/", "-") + "-", dir=root_dir)  # kept for the read-back
    torch.set_num_threads(threads)  # in case a library changed it
    gc.collect()
    fit = variant.fit(measurement.workload, measurement.epochs, run_dir)
    check_fit(measurement, variant, fit, problems)
    return fit


def measure(
    measurement: Measurement, variants: list[Variant], repeats: int, root_dir: str, threads: int, rng: random.Random,
    problems: list[str],
) -> dict[str, list[Fit]]:
    """One untimed warm-up fit of each variant, then `repeats` rounds of one fit of each, in an order shuffled per
    round, so slow drifts of the machine hit all variants alike."""
    for variant in variants:
        run_fit(measurement, variant, root_dir, threads, problems)
    fits: dict[str, list[Fit]] = {variant.key: [] for variant in variants}
    for repeat in range(repeats):
        order = list(variants)
        rng.shuffle(order)
        for variant in order:
            fits[variant.key].append(run_fit(measurement, variant, root_dir, threads, problems))
        print(f"  round {repeat + 1}/{repeats}: " + ", ".join(
            f"{variant.key} {fits[variant.key][-1].iterations_per_second:,.0f}" for variant in variants) + " it/s",
            flush=True)
    return fits


# ------------------------------------------------------------------------------------------------ summaries
def summarize(variants: list[Variant], fits: dict[str, list[Fit]], statistic: str) -> list[dict[str, Any]]:
    """One row per variant: its throughput, its ratio to its framework's no-logger baseline (of the medians, and
    paired: the median of the per-round ratios, which a drift longer than a round does not move), and the goal's
    verdict for tracktrain's loggers: `yes` / `NO`, "(within noise)" where the margin, either way, is smaller than
    the interquartile range of the paired ratios."""
    center = STATISTICS[statistic]
    baselines = {variant.framework: variant.key for variant in variants if variant.is_baseline}
    rows = []
    for variant in variants:
        samples = [fit.iterations_per_second for fit in fits[variant.key]]
        base_key = baselines.get(variant.framework)
        base_samples = [fit.iterations_per_second for fit in fits[base_key]] if base_key else []
        it_per_s = center(samples)
        ratio = paired = noise = None
        goal = "—"
        if base_samples and not variant.is_baseline:
            ratio = it_per_s / center(base_samples)
            paired_ratios = [mine / base for mine, base in zip(samples, base_samples)]  # same round, side by side
            paired = statistics.median(paired_ratios)
            q1, q3 = quartiles(paired_ratios)
            noise = q3 - q1
            if variant.framework == TRACKTRAIN:
                margin = ratio - GOAL_RATIO
                goal = "yes" if margin >= 0 else "NO"
                if abs(margin) <= noise:
                    goal += " (within noise)"
        tails = [fit.tail_seconds * 1e3 for fit in fits[variant.key]]
        rows.append({
            "key": variant.key, "framework": variant.framework, "logger": variant.logger,
            "baseline": variant.is_baseline, "statistic": statistic,
            "it_per_s": it_per_s, "us_per_it": 1e6 / it_per_s,
            "iqr_it_per_s": (lambda q: q[1] - q[0])(quartiles(samples)),
            "ratio": ratio, "paired_ratio": paired, "paired_ratio_iqr": noise,
            "goal_ratio": GOAL_RATIO if variant.framework == TRACKTRAIN and not variant.is_baseline else None,
            "goal_met": goal,
            "end_of_fit_ms": statistics.median(tails),
            "samples_it_per_s": samples, "samples_end_of_fit_ms": tails,
        })
    return rows


fmt = functools.partial(format_cell, decimals=1)


def table(lines: list[list[str]], align: str) -> str:
    """A markdown table: the first line is the header; `align` has one of l / r per column."""
    rule = "|" + "|".join(":---" if side == "l" else "---:" for side in align) + "|"
    rows = ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join([rows[0], rule, *rows[1:]])


def arrived_cell(check: dict[str, Any] | None) -> str:
    if check is None:
        return "— (no logger)"
    runs, complete = check["runs"], check["complete_runs"]
    verdict = "all" if complete == runs else f"MISSING in {runs - complete} of"
    return f"{verdict} {runs} runs: {len(METRIC_NAMES)} × {check['values_per_metric']} values each"


def report(rows: list[dict[str, Any]], measurement: Measurement, stat: str, notes: list[str]) -> None:
    lines = [[
        "framework", "logger", "it/s", "µs/it", "× its no-logger it/s", "paired × (IQR)",
        f"goal ≥ {GOAL_RATIO:g}×", "end of fit ms", "arrived (read back)",
    ]]
    for row in rows:
        paired = "—" if row["paired_ratio"] is None else f"{row['paired_ratio']:.3f} ({row['paired_ratio_iqr']:.3f})"
        lines.append([
            row["framework"], row["logger"], fmt(row["it_per_s"]), fmt(row["us_per_it"]),
            "1 (baseline)" if row["baseline"] else f"{row['ratio']:.3f}", paired, row["goal_met"],
            fmt(row["end_of_fit_ms"]), arrived_cell(row.get("arrived")),
        ])
    print("\n## Throughput with 5 metrics logged at every step, start-up and end of fit excluded\n")
    print(table(lines, "llrrrrlrl") + "\n")
    print(
        f"it/s: {stat} over the fits of (steps from the 2nd epoch's start to the last iteration) / (the time between "
        f"them); {measurement.timed_steps} steps per fit. ×: that over the {stat} of the same framework's no-logger "
        "fits; paired ×: median of the per-round ratios (fits of one round ran side by side), with their "
        "interquartile range: ratios closer than it are not told apart. goal: tracktrain's loggers only, from the "
        "× column; '(within noise)' where the margin, either way, is smaller than the IQR. end of fit: median time "
        "from the last iteration to the return of fit (the logger delivers what is still queued and closes its "
        "run). arrived: every fit's run read back after the timing (MlflowClient.get_metric_history for each metric, "
        "the CSV file, `wandb leet inspect --json`)."
    )
    for note in notes:
        print(f"- {note}")
    verdicts = [(row["key"], row["goal_met"]) for row in rows if row["goal_ratio"] is not None]
    if verdicts:
        print(goal_line(f"Goal (a tracktrain logger keeps ≥ {GOAL_RATIO:g} × the no-logger throughput)", verdicts,
                        "loggers"))


# ------------------------------------------------------------------------------------------------- profile
class ThreadProfiles:
    """cProfile of every thread started while it is installed (the loggers' delivery threads and, with
    delivery="thread", MLflow's request threads; a sender child's work is in another process, not here), grouped by
    thread name; the training thread is profiled apart."""

    def __init__(self) -> None:
        self.by_thread: dict[str, list[cProfile.Profile]] = {}

    def __enter__(self) -> ThreadProfiles:
        threading.setprofile(self._start)
        return self

    def __exit__(self, *exc: Any) -> None:
        threading.setprofile(None)

    def _start(self, frame: Any, event: str, arg: Any) -> None:
        sys.setprofile(None)
        profiler = cProfile.Profile()
        name = threading.current_thread().name.rstrip("0123456789-_ ") or "thread"
        self.by_thread.setdefault(name, []).append(profiler)
        profiler.enable()  # from here this thread's calls are counted (enable() sets this thread's hook only)

    def stats(self) -> dict[str, pstats.Stats]:
        merged = {}
        for name, profilers in self.by_thread.items():
            stats = pstats.Stats(profilers[0], stream=sys.stdout)
            for profiler in profilers[1:]:
                stats.add(profiler)
            merged[name] = stats
        return merged


def profile_variants(measurement: Measurement, variants: list[Variant], root_dir: str, threads: int, top: int) -> None:
    """cProfile one fit of each tracktrain logger variant, whole (start-up and end included): the training thread
    by own time and tracktrain's functions by cumulative time; every other thread by own time."""
    for variant in variants:
        if variant.framework != TRACKTRAIN or variant.is_baseline:
            continue
        profiler = cProfile.Profile()
        with ThreadProfiles() as others:
            torch.set_num_threads(threads)
            gc.collect()
            run_dir = tempfile.mkdtemp(prefix="profile-", dir=root_dir)
            profiler.enable()
            variant.fit(measurement.workload, measurement.epochs, run_dir)
            profiler.disable()
        print(f"\n### cProfile: {variant.key} ({measurement.steps} steps, start-up and end included)\n")
        stats = pstats.Stats(profiler, stream=sys.stdout)
        print(f"training thread, top {top} by own time:\n\n```")
        stats.sort_stats("tottime").print_stats(top)
        print("```\n\ntracktrain's functions in the training thread by cumulative time:\n\n```")
        stats.sort_stats("cumulative").print_stats(r"tracktrain", top)
        print("```")
        for name, thread_stats in others.stats().items():
            print(f"\nthread(s) {name!r} ({len(others.by_thread[name])} started), top {top} by own time:\n\n```")
            thread_stats.sort_stats("tottime").print_stats(top)
            print("```")


# ------------------------------------------------------------------------------------------------------ main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--quick", action="store_true", help="small counts: a smoke test, not a measurement")
    add("--repeats", type=int, help="timed fits per variant, after one warm-up fit (default 6; --quick 1)")
    add("--epochs", type=int, help="epochs of a fit, the first not timed (default 4; --quick 2)")
    add("--batches", type=int, help="batches per epoch (default 100; --quick 20)")
    add("--batch-size", type=int, default=32, help="samples per batch (default 32: a step of ~1.2 ms here)")
    add("--variants", help="comma-separated words; the variants whose key holds one run, with each framework's "
        "baseline (keys: tracktrain/none, tracktrain/csv, tracktrain/mlflow-sqlite, tracktrain/mlflow-server, "
        "tracktrain/wandb-offline, with --thread-delivery the same three ending -thread, lightning/none, "
        "lightning/mlflow-sqlite, lightning/mlflow-server; default all)")
    add("--no-lightning", action="store_true", help="leave Lightning out")
    add("--thread-delivery", action="store_true", help="also run tracktrain's MLflow and W&B loggers with "
        "delivery='thread' (keys ending -thread): their tracker client in a thread of the training process, as "
        "before delivery='process' was their default")
    add("--threads", type=int, default=1, help="torch.set_num_threads for every fit (default 1)")
    add("--stat", choices=sorted(STATISTICS), default="median",
        help="statistic of the fits to report (default median; p25 or min resist interference from other processes)")
    add("--profile", action="store_true", help="after timing, cProfile one fit of each tracktrain logger, every "
        "thread")
    add("--profile-top", type=int, default=20, help="rows of each profile (default 20)")
    add("--root-dir", help="where the runs, the sqlite file and the server's store go, in a temporary directory made "
        "and removed there (default: the system's temporary directory)")
    add("--seed", type=int, default=0, help="seed of the data, the weights and the shuffled orders")
    add("--json", metavar="PATH", help="also write all results (with every sample) to PATH")
    args = parser.parse_args(argv)
    defaults = {"repeats": (6, 1), "epochs": (4, 2), "batches": (100, 20)}
    for name, (full, small) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, small if args.quick else full)
    for name in ("repeats", "batches", "batch_size", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.epochs < 2:
        parser.error(f"--epochs must be at least 2 (the first epoch is not timed), got {args.epochs}")
    return args


def installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def load_lightning(skip: bool) -> tuple[Any, str]:
    if skip:
        return None, "left out (--no-lightning)"
    try:
        import lightning
    except Exception as error:  # not installed, or an install that fails to import
        return None, f"not installed ({type(error).__name__}: {error})"
    silence_lightning()
    return lightning, lightning.__version__


def versions(available: dict[str, bool], lightning_status: str) -> dict[str, str]:
    found = {"lightning": lightning_status}
    for name in ("mlflow", "wandb"):
        if available[name]:
            found[name] = __import__(name).__version__
        else:
            found[name] = "not installed: its variants are left out"
    return found


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    rng = random.Random(args.seed)
    root_dir = tempfile.mkdtemp(prefix="tracktrain-bench-logging-", dir=args.root_dir)
    atexit.register(shutil.rmtree, root_dir, True)
    quiet_trackers(root_dir)
    available = {name: installed(name) for name in ("mlflow", "wandb")}
    lightning, lightning_status = load_lightning(args.no_lightning)
    peers = versions(available, lightning_status)
    trackers = Trackers(root_dir, f"sqlite:///{os.path.join(root_dir, 'mlflow.db')}")
    variants = select(make_variants(trackers, lightning, available, args.thread_delivery), args.variants)
    measurement = Measurement(Workload(args.batch_size, args.batches, args.seed), args.epochs)

    env = environment(args.threads, **peers)
    print_heading(
        "tracktrain loggers: training throughput with 5 metrics logged at every step", env, args.threads,
        ", ".join(f"{name} {version}" for name, version in peers.items()),
        f"{args.repeats} interleaved repeats", args.stat, args.quick,
    )
    print(f"{measurement.workload.describe()}; fits of {args.epochs} epochs, the first not timed\n")
    problems: list[str] = []
    notes: list[str] = []
    try:
        if any(variant.needs_server for variant in variants):
            server_dir = os.path.join(root_dir, "mlflow-server")
            os.makedirs(server_dir)
            trackers.server = MlflowServer(server_dir)
            seconds = trackers.server.start()
            notes.append(f"mlflow server on {trackers.server.url} (sqlite backend, 1 worker) answered after "
                         f"{seconds:.1f} s; it shares the machine's CPUs with the training process.")
        # torch, the libraries, the data and the server live to the end: out of the collector's sight, so that the
        # gc.collect() before each fit, and any collection during one, stay cheap
        gc.collect()
        gc.freeze()
        started = time.perf_counter()
        fits = measure(measurement, variants, args.repeats, root_dir, args.threads, rng, problems)
        timed_seconds = time.perf_counter() - started
        checks = verify_deliveries(measurement, problems)
        rows = summarize(variants, fits, args.stat)
        for row in rows:
            row["arrived"] = checks.get(row["key"])
        runs = sum(len(deliveries) for deliveries in measurement.deliveries.values())
        notes.append(f"the fits took {timed_seconds:.0f} s, the read-back of {runs} runs "
                     f"{time.perf_counter() - started - timed_seconds:.0f} s.")
        if any(variant.key.startswith(("tracktrain/mlflow", "tracktrain/wandb")) for variant in variants):
            notes.append("tracktrain's MLflowLogger and WandbLogger deliver from a child process (delivery='process', "
                         "their default), which the warm-up fit starts and which each next fit takes over warm; its "
                         "CPU time, W&B's service's and the mlflow server's are not this process's, but share its "
                         "2 cores.")
        if lightning is not None and available["mlflow"]:
            notes.append("Lightning's MLFlowLogger as shipped: one synchronous MlflowClient.log_batch per logged step "
                         "in the training thread (MLflow's async logging is off unless MLFLOW_ENABLE_ASYNC_LOGGING "
                         "is set).")
        report(rows, measurement, args.stat, notes)
        if args.profile:
            profile_variants(measurement, variants, root_dir, args.threads, args.profile_top)
    finally:
        if trackers.server is not None:
            trackers.server.stop()
        if available["wandb"] and "wandb" in sys.modules:
            sys.modules["wandb"].teardown()  # W&B's service process, which the runs started
    if args.json:
        write_json(args.json, {
            "environment": env, "arguments": vars(args), "goal_ratio": GOAL_RATIO, "metric_names": list(METRIC_NAMES),
            "steps_per_fit": measurement.steps, "timed_steps_per_fit": measurement.timed_steps,
            "rows": rows, "problems": problems,
        })
    return exit_status(problems)


if __name__ == "__main__":
    sys.exit(main())
