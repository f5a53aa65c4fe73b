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
import cProfile
import functools
import importlib.util
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import harness as h
import torch
from logging_trackers import METRIC_NAMES, Delivery, Trackers, quiet_trackers, verify_deliveries
from logging_variants import TRACKTRAIN, Fit, Variant, make_variants, select
from workloads import ClassifierData, load_peer, weights, weights_match

from tracktrain_integrations.testing import MlflowServer

GOAL_RATIO = 0.95  # the "at least 0.95× the no-logger throughput at every-step logging"
MODEL = (256, 512, 512, 10)


# ------------------------------------------------------------------------------------------------- checks
@dataclass
class Measurement:
    """What the fits of one run of the script share: the workload, the reference weights (the first fit's), and
    what was logged where, read back after the timing."""

    workload: ClassifierData
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
        problems.append(
            f"{variant.key}: took {fit.steps} steps ({fit.timed_steps} timed), expected "
            f"{measurement.steps} ({measurement.timed_steps} timed)"
        )
    trained = weights(fit.net)
    if measurement.reference is None:
        measurement.reference = trained
    elif not weights_match(trained, measurement.reference):
        problems.append(f"{variant.key}: the trained weights differ from the first fit's")
    if fit.delivery is not None:
        measurement.deliveries.setdefault(variant.key, []).append(fit.delivery)
        if fit.delivery.undelivered:
            problems.append(f"{variant.key}: {fit.delivery.undelivered} records left undelivered at the end of the fit")


# ----------------------------------------------------------------------------------------------- measuring
def run_fit(measurement: Measurement, variant: Variant, root_dir: str, threads: int, problems: list[str]) -> Fit:
    run_dir = tempfile.mkdtemp(prefix=variant.key.replace("/", "-") + "-", dir=root_dir)  # kept for the read-back
    h.before_run(threads)
    fit = variant.fit(measurement.workload, measurement.epochs, run_dir)
    check_fit(measurement, variant, fit, problems)
    return fit


def measure(
    measurement: Measurement,
    variants: list[Variant],
    repeats: int,
    root_dir: str,
    threads: int,
    rng: random.Random,
    problems: list[str],
) -> dict[str, list[Fit]]:
    """Fits of each variant on the harness: a warm-up, then `repeats` interleaved rounds."""

    def run(variant: Variant) -> Fit:
        return run_fit(measurement, variant, root_dir, threads, problems)

    return h.measure(variants, repeats, rng, run, label=lambda variant: variant.key)


# ------------------------------------------------------------------------------------------------ summaries
def summarize(variants: list[Variant], fits: dict[str, list[Fit]], statistic: str) -> list[dict[str, Any]]:
    """One row per variant: its throughput, its ratio to its framework's no-logger baseline (of the medians, and
    paired: the median of the per-round ratios, which a drift longer than a round does not move), and the goal's
    verdict for tracktrain's loggers: `yes` / `NO`, "(within noise)" where the margin, either way, is smaller than
    the interquartile range of the paired ratios."""
    center = h.STATISTICS[statistic]
    baselines = {variant.framework: variant.key for variant in variants if variant.is_baseline}
    rows = []
    for variant in variants:
        samples = [fit.iterations_per_second for fit in fits[variant.key]]
        base_key = baselines.get(variant.framework)
        base_samples = [fit.iterations_per_second for fit in fits[base_key]] if base_key else []
        it_per_s = center(samples)
        ratio = paired = noise = whole = whole_noise = None
        goal = "—"
        if base_samples and not variant.is_baseline:
            # the whole fit, start-up and end included: the same steps, so the ratio of times is that of throughputs
            whole_ratios = [
                base.whole_seconds / mine.whole_seconds for mine, base in zip(fits[variant.key], fits[base_key])
            ]
            whole, whole_noise = statistics.median(whole_ratios), h.iqr(whole_ratios)
            ratio = it_per_s / center(base_samples)
            paired_ratios = [mine / base for mine, base in zip(samples, base_samples)]  # same round, side by side
            paired = statistics.median(paired_ratios)
            noise = h.iqr(paired_ratios)
            if variant.framework == TRACKTRAIN:
                goal = h.verdict(ratio - GOAL_RATIO, noise)
        tails = [fit.tail_seconds * 1e3 for fit in fits[variant.key]]
        rows.append(
            {
                "key": variant.key,
                "framework": variant.framework,
                "logger": variant.logger,
                "baseline": variant.is_baseline,
                "statistic": statistic,
                "it_per_s": it_per_s,
                "us_per_it": 1e6 / it_per_s,
                "iqr_it_per_s": h.iqr(samples),
                "ratio": ratio,
                "paired_ratio": paired,
                "paired_ratio_iqr": noise,
                "goal_ratio": GOAL_RATIO if variant.framework == TRACKTRAIN and not variant.is_baseline else None,
                "goal_met": goal,
                "end_of_fit_ms": statistics.median(tails),
                "whole_fit_paired_ratio": whole,
                "whole_fit_paired_ratio_iqr": whole_noise,
                "samples_whole_fit_s": [fit.whole_seconds for fit in fits[variant.key]],
                "samples_it_per_s": samples,
                "samples_end_of_fit_ms": tails,
            }
        )
    return rows


fmt = functools.partial(h.format_cell, decimals=1)


def arrived_cell(check: dict[str, Any] | None) -> str:
    if check is None:
        return "— (no logger)"
    runs, complete = check["runs"], check["complete_runs"]
    amount = "all" if complete == runs else f"MISSING in {runs - complete} of"
    return f"{amount} {runs} runs: {len(METRIC_NAMES)} × {check['values_per_metric']} values each"


def report(rows: list[dict[str, Any]], measurement: Measurement, stat: str, notes: list[str]) -> None:
    def paired(key: str) -> Callable[[dict[str, Any]], str]:
        return lambda row: "—" if row[key] is None else f"{row[key]:.3f} ({row[key + '_iqr']:.3f})"

    columns = [
        ("framework", "l", lambda row: row["framework"]),
        ("logger", "l", lambda row: row["logger"]),
        ("it/s", "r", lambda row: fmt(row["it_per_s"])),
        ("µs/it", "r", lambda row: fmt(row["us_per_it"])),
        ("× its no-logger it/s", "r", lambda row: "1 (baseline)" if row["baseline"] else f"{row['ratio']:.3f}"),
        ("paired × (IQR)", "r", paired("paired_ratio")),
        (f"goal ≥ {GOAL_RATIO:g}×", "l", lambda row: row["goal_met"]),
        ("end of fit ms", "r", lambda row: fmt(row["end_of_fit_ms"])),
        ("whole fit paired × (IQR)", "r", paired("whole_fit_paired_ratio")),
        ("arrived (read back)", "l", lambda row: arrived_cell(row.get("arrived"))),
    ]
    print("\n## Throughput with 5 metrics logged at every step, start-up and end of fit excluded\n")
    print(h.table(rows, columns) + "\n")
    print(
        f"it/s: {stat} over the fits of (steps from the 2nd epoch's start to the last iteration) / (the time between "
        f"them); {measurement.timed_steps} steps per fit. ×: that over the {stat} of the same framework's no-logger "
        "fits; paired ×: median of the per-round ratios (fits of one round ran side by side), with their "
        "interquartile range: ratios closer than it are not told apart. goal: tracktrain's loggers only, from the "
        "× column; '(within noise)' where the margin, either way, is smaller than the IQR. end of fit: median time "
        "from the last iteration to the return of fit (the logger delivers what is still queued and closes its "
        "run). whole fit: the paired ratio of the no-logger fit's time to this fit's, from building the logger and "
        "the Trainer to the return of fit (start-up and end included; they cost the same whatever the fit's length, "
        "so their share shrinks as fits grow). arrived: every fit's run read back after the timing (MlflowClient.get_metric_history for each metric, "
        "the CSV file, `wandb leet inspect --json`)."
    )
    for note in notes:
        print(f"- {note}")
    verdicts = [(row["key"], row["goal_met"]) for row in rows if row["goal_ratio"] is not None]
    if verdicts:
        print(
            h.goal_line(
                f"Goal (a tracktrain logger keeps ≥ {GOAL_RATIO:g} × the no-logger throughput)", verdicts, "loggers"
            )
        )


# ------------------------------------------------------------------------------------------------- profile
def profile_variants(measurement: Measurement, variants: list[Variant], root_dir: str, threads: int, top: int) -> None:
    """cProfile one fit of each tracktrain logger variant, whole (start-up and end included): the training thread
    by own time and tracktrain's functions by cumulative time; every other thread by own time."""
    for variant in variants:
        if variant.framework != TRACKTRAIN or variant.is_baseline:
            continue
        profiler = cProfile.Profile()
        with h.ThreadProfiles() as others:
            h.before_run(threads)
            run_dir = tempfile.mkdtemp(prefix="profile-", dir=root_dir)
            profiler.enable()
            variant.fit(measurement.workload, measurement.epochs, run_dir)
            profiler.disable()
        print(f"\n### cProfile: {variant.key} ({measurement.steps} steps, start-up and end included)\n")
        h.print_profile(profiler, f"training thread, top {top} by own time:", top)
        h.print_profile(
            profiler,
            "\ntracktrain's functions in the training thread by cumulative time:",
            top,
            "cumulative",
            r"tracktrain",
        )
        for name, thread_stats in others.stats().items():
            h.print_profile(
                thread_stats,
                f"\nthread(s) {name!r} ({len(others.by_thread[name])} started), top {top} by own time:",
                top,
            )


# ------------------------------------------------------------------------------------------------------ main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = h.make_parser(
        __doc__, profile_top=20, root_dir="the runs, the sqlite file and the server's store", stat_of="the fits"
    )
    add = parser.add_argument
    add("--repeats", type=int, help="timed fits per variant, after one warm-up fit (default 6; --quick 1)")
    add("--epochs", type=int, help="epochs of a fit, the first not timed (default 4; --quick 2)")
    add("--batches", type=int, help="batches per epoch (default 100; --quick 20)")
    add("--batch-size", type=int, default=32, help="samples per batch (default 32: a step of ~1.2 ms here)")
    add(
        "--variants",
        help="comma-separated words; the variants whose key holds one run, with each framework's "
        "baseline (keys: tracktrain/none, tracktrain/csv, tracktrain/mlflow-sqlite, tracktrain/mlflow-server, "
        "tracktrain/wandb-offline, with --thread-delivery the same three ending -thread, lightning/none, "
        "lightning/mlflow-sqlite, lightning/mlflow-server; default all)",
    )
    add(
        "--thread-delivery",
        action="store_true",
        help="also run tracktrain's MLflow and W&B loggers with "
        "delivery='thread' (keys ending -thread): their tracker client in a thread of the training process, as "
        "before delivery='process' was their default",
    )
    return h.finish_args(
        parser,
        argv,
        {"repeats": (6, 1), "epochs": (4, 2), "batches": (100, 20)},
        positive=["repeats", "batches", "batch_size", "threads"],
        at_least_two=["epochs"],
    )


def installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


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
    rng = h.prepare(args)
    root_dir = h.temporary_root("tracktrain-bench-logging-", args.root_dir)
    quiet_trackers(root_dir)
    available = {name: installed(name) for name in ("mlflow", "wandb")}
    lightning, lightning_status = load_peer("lightning", skip=args.no_lightning)
    peers = versions(available, lightning_status)
    trackers = Trackers(root_dir, f"sqlite:///{os.path.join(root_dir, 'mlflow.db')}")
    variants = select(make_variants(trackers, lightning, available, args.thread_delivery), args.variants)
    measurement = Measurement(ClassifierData(MODEL, args.batch_size, args.batches, args.seed), args.epochs)

    env = h.environment(args.threads, **peers)
    h.print_heading(
        "tracktrain loggers: training throughput with 5 metrics logged at every step",
        env,
        args,
        ", ".join(f"{name} {version}" for name, version in peers.items()),
        f"{args.repeats} interleaved repeats",
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
            notes.append(
                f"mlflow server on {trackers.server.url} (sqlite backend, 1 worker) answered after "
                f"{seconds:.1f} s; it shares the machine's CPUs with the training process."
            )
        h.freeze_garbage()  # the server too lives to the end
        started = time.perf_counter()
        fits = measure(measurement, variants, args.repeats, root_dir, args.threads, rng, problems)
        timed_seconds = time.perf_counter() - started
        checks = verify_deliveries(measurement.deliveries, measurement.steps, problems)
        rows = summarize(variants, fits, args.stat)
        for row in rows:
            row["arrived"] = checks.get(row["key"])
        runs = sum(len(deliveries) for deliveries in measurement.deliveries.values())
        notes.append(
            f"the fits took {timed_seconds:.0f} s, the read-back of {runs} runs "
            f"{time.perf_counter() - started - timed_seconds:.0f} s."
        )
        if any(variant.key.startswith(("tracktrain/mlflow", "tracktrain/wandb")) for variant in variants):
            notes.append(
                "tracktrain's MLflowLogger and WandbLogger deliver from a child process (delivery='process', "
                "their default), which the warm-up fit starts and which each next fit takes over warm; its "
                "CPU time, W&B's service's and the mlflow server's are not this process's, but share its "
                "2 cores."
            )
        if lightning is not None and available["mlflow"]:
            notes.append(
                "Lightning's MLFlowLogger as shipped: one synchronous MlflowClient.log_batch per logged step "
                "in the training thread (MLflow's async logging is off unless MLFLOW_ENABLE_ASYNC_LOGGING "
                "is set)."
            )
        report(rows, measurement, args.stat, notes)
        if args.profile:
            profile_variants(measurement, variants, root_dir, args.threads, args.profile_top)
    finally:
        if trackers.server is not None:
            trackers.server.stop()
        if available["wandb"] and "wandb" in sys.modules:
            sys.modules["wandb"].teardown()  # W&B's service process, which the runs started
    return h.finish(
        args,
        {
            "environment": env,
            "arguments": vars(args),
            "goal_ratio": GOAL_RATIO,
            "metric_names": list(METRIC_NAMES),
            "steps_per_fit": measurement.steps,
            "timed_steps_per_fit": measurement.timed_steps,
            "rows": rows,
        },
        problems,
    )


if __name__ == "__main__":
    sys.exit(main())
