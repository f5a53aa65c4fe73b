#!/usr/bin/env python
"""Training throughput of `Trainer.fit` while the module logs 5 metrics at every step (`log_every_n_steps=1`, no bar
or checkpoints), with each tracker's logger next to no logger at all: tracktrain's CSVLogger, MLflowLogger (an
embedded sqlite file, and a local `mlflow server` started here) and WandbLogger (offline), each with its default
`delivery="process"` (and with `--thread-delivery` also "thread"); and Lightning's MLFlowLogger next to Lightning
without a logger. A sample is one fit's iterations per second from its second epoch's start to its last iteration;
the end of the fit (queued records delivered, run closed) is reported apart. After the timing
every run is read back: each metric must have arrived at every step. Details in benchmarks/README.md.

    .venv/bin/python benchmarks/bench_logging.py --quick      # smoke test, ~30 s
    .venv/bin/python benchmarks/bench_logging.py              # the real run, ~2.5 min on 2 cores

Timing never makes this script fail; it exits with status 1 when a fit took the wrong number of steps, trained
other weights than the first fit, or a run is missing a metric value at some step, was not closed, or left records
undelivered.
"""

from __future__ import annotations

import cProfile
import importlib.util
import os
import random
import statistics
import sys
import tempfile
import time
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


def summarize(variants: list[Variant], fits: dict[str, list[Fit]], arrived: dict, stat: str) -> list[dict[str, Any]]:
    """Each variant's throughput next to its framework's no-logger fits, the goal on tracktrain's loggers, the end
    of the fit and what arrived (read back) as columns."""
    bases = {variant.framework: variant.key for variant in variants if variant.is_baseline}
    bases = {variant.key: bases.get(variant.framework) for variant in variants if not variant.is_baseline}
    speed = {key: [fit.iterations_per_second for fit in values] for key, values in fits.items()}
    goal: dict[str, dict[str, Any]] = {"goal": {}}
    for key, base in bases.items():
        if key.startswith(TRACKTRAIN) and base:
            goal["goal"] |= h.ratio_goal(speed, base, key, GOAL_RATIO, stat, least=True)["goal"]
    tails = {key: statistics.median(fit.tail_seconds * 1e3 for fit in values) for key, values in fits.items()}
    cells = {key: arrived_cell(arrived.get(key)) for key in fits}
    return h.compare("throughput", speed, bases, "it/s", stat, end_of_fit_ms=tails, arrived=cells, **goal)


def arrived_cell(check: dict[str, Any] | None) -> str:
    if check is None:
        return "— (no logger)"
    runs, complete = check["runs"], check["complete_runs"]
    amount = "all" if complete == runs else f"MISSING in {runs - complete} of"
    return f"{amount} {runs} runs: {len(METRIC_NAMES)} × {check['values_per_metric']} values each"


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
    args = h.parse(
        __doc__,
        argv,
        {
            "repeats": (6, 1, "timed fits per variant, after one warm-up fit"),
            "epochs": (4, 2, "epochs of a fit, the first not timed"),
            "batches": (100, 20, "batches per epoch"),
            "batch_size": (32, 32, "samples per batch (a step of ~1.2 ms here)"),
        },
        options=lambda add: (
            add(
                "--variants",
                help="comma-separated words: the variants whose key holds one run, with each "
                "framework's baseline (tracktrain/none, tracktrain/csv, tracktrain/mlflow-sqlite, "
                "tracktrain/mlflow-server, tracktrain/wandb-offline, lightning/none, lightning/mlflow-sqlite, "
                "lightning/mlflow-server; default all)",
            ),
            add(
                "--thread-delivery",
                action="store_true",
                help="also tracktrain's MLflow and W&B loggers with "
                "delivery='thread' (keys ending -thread): their client in a thread of the training process",
            ),
        ),
        positive=["repeats", "batches", "batch_size", "threads"],
        at_least_two=["epochs"],
        profile_top=20,
        root_dir="the runs, the sqlite file and the server's store",
        stat_of="the fits",
    )
    rng = h.prepare(args)
    root_dir = h.temporary_root("tracktrain-bench-logging-", args.root_dir)
    quiet_trackers(root_dir)
    available = {name: installed(name) for name in ("mlflow", "wandb")}
    lightning, lightning_status = load_peer("lightning", skip=args.no_lightning)
    peers = versions(available, lightning_status)
    trackers = Trackers(root_dir, f"sqlite:///{os.path.join(root_dir, 'mlflow.db')}")
    variants = select(make_variants(trackers, lightning, available, args.thread_delivery), args.variants)
    measurement = Measurement(ClassifierData(MODEL, args.batch_size, args.batches, args.seed), args.epochs)

    env = h.start(
        "tracktrain loggers: training throughput with 5 metrics logged at every step",
        args,
        f"{args.repeats} interleaved repeats",
        **peers,
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
        rows = summarize(variants, fits, checks, args.stat)
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
        h.report(rows, "goal", "end_of_fit_ms", "arrived", decimals=1)
        print(
            f"throughput: {measurement.timed_steps} steps per fit from the 2nd epoch's start to the last iteration. "
            "end_of_fit_ms: from the last iteration to the return of fit (the logger delivers what is queued and "
            "closes its run). arrived: "
            "every fit's run read back (MlflowClient, the CSV file, `wandb leet inspect --json`)."
        )
        for note in notes:
            print(f"- {note}")
        if h.goals(rows):
            goal = f"Goal (a tracktrain logger keeps ≥ {GOAL_RATIO:g} × the no-logger throughput)"
            print(h.goal_line(goal, h.goals(rows), "loggers"))
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
            "metric_names": list(METRIC_NAMES),
            "steps_per_fit": measurement.steps,
            "timed_steps_per_fit": measurement.timed_steps,
            "rows": rows,
        },
        problems,
    )


if __name__ == "__main__":
    sys.exit(main())
