#!/usr/bin/env python
"""Per-step cost of tracktrain's Trainer step variants (fp32, bf16-mixed, 16-mixed, DDP) next to the same variant
written by hand, on the medium MLP.

Each variant is a pair measured in the same run: a hand-written loop ("raw") and `Trainer.fit` doing the same
arithmetic on the same data from the same initial weights:

- fp32: the plain loop next to `Trainer()`;
- bf16: the loop under `torch.autocast("cpu", dtype=torch.bfloat16)` next to `Trainer(precision="bf16-mixed")`;
- fp16: the loop under autocast fp16 with a `torch.amp.GradScaler("cpu")` (scale, step, update) next to
  `Trainer(precision="16-mixed")`;
- ddp: 2 gloo processes on the CPU, one thread each, started by `tracktrain.distributed.spawn` and joining the
  group on 127.0.0.1 and a free port: a DistributedDataParallel + DistributedSampler loop next to
  `Trainer(strategy="ddp")`, interleaved in the same processes (with each variant in launches of its own, the
  measured difference swung from −1 % to +27 % between runs on a shared machine). Rank 0's clock counts.

One sample is one fit's time per optimizer step from the start of its second epoch to the end of the run, read
inside the loop (tracktrain: by handlers on `trainer.train_engine`, which run before the Trainer's own at each
event): start-up, tear-down and the first epoch (first calls, DDP's first bucket rebuild) stay out, every
per-step and per-epoch cost is in. The project's goal: what the Trainer costs on top of the hand-written step stays
within a few percent (here: 5 %) on the medium model.

    .venv/bin/python benchmarks/bench_step_variants.py --quick      # smoke test, ~20 s
    .venv/bin/python benchmarks/bench_step_variants.py              # the real run, ~2 min on 2 cores

Timing never makes this script fail. It exits with status 1 only when a sanity check fails: a fit took the wrong
number of optimizer steps, its weights differ from the hand-written loop's (fp32 and DDP: rtol 1e-5; bf16 and
fp16: rtol 1e-2, atol 1e-4), the Trainer's GradScaler ended at another scale than the hand-written one, the
module's logged loss is missing, or the two DDP ranks disagree. See benchmarks/README.md for how to read the table.
"""

from __future__ import annotations

import argparse
import functools
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import harness as h
import torch
from step_fits import (
    BATCH_SIZE,
    FITTERS,
    MEDIUM,
    RAW,
    TRACKTRAIN,
    WORLD_SIZE,
    DDPConfig,
    Fit,
    ddp_process,
    medium_data,
    rank_file,
)
from workloads import ClassifierData, check_steps, max_difference, weights, weights_match

from tracktrain.distributed import spawn
from tracktrain_integrations.testing import free_port

DDP = "ddp"
GOAL_PERCENT = 5.0  # the "within a few percent on the medium model"


@dataclass(frozen=True)
class Precision:
    """One precision: the Trainer's name for it, what the hand-written loop does, and how close its weights must
    come to the hand-written loop's."""

    key: str
    trainer_precision: str
    autocast_dtype: torch.dtype | None
    grad_scaler: bool
    rtol: float
    atol: float


# Both loops run the same kernels in the same order, so all variants have ended bit-identical so far; mixed
# precision still gets a tolerance, as one rounding taken differently under autocast would be no bug.
PRECISIONS = {
    "fp32": Precision("fp32", "32-true", None, False, rtol=1e-5, atol=1e-7),
    "bf16": Precision("bf16", "bf16-mixed", torch.bfloat16, False, rtol=1e-2, atol=1e-4),
    "fp16": Precision("fp16", "16-mixed", torch.float16, True, rtol=1e-2, atol=1e-4),
}
DDP_TOLERANCE = {"rtol": 1e-5, "atol": 1e-7}
TITLES = {
    "fp32": "fp32: loop vs Trainer()",
    "bf16": 'bf16: autocast loop vs Trainer(precision="bf16-mixed")',
    "fp16": 'fp16: autocast + GradScaler loop vs Trainer(precision="16-mixed")',
    DDP: f'ddp, {WORLD_SIZE} gloo processes: DDP loop vs Trainer(strategy="ddp")',
}


@dataclass
class Case:
    """One precision on one workload, fits of `epochs` epochs; the raw loop's first fit is the reference every
    fit is checked against."""

    precision: Precision
    workload: ClassifierData
    epochs: int
    reference: Fit | None = None
    max_weight_diff: dict[str, float] = field(default_factory=dict)  # variant -> largest |Δ| to the reference

    @property
    def timed_steps(self) -> int:
        return (self.epochs - 1) * self.workload.batches_per_epoch


def check_fit(case: Case, variant: str, fit: Fit, problems: list[str]) -> None:
    """After every fit, outside the timing: the steps, the weights, the logged loss, the GradScaler's scale."""
    where = f"[{case.precision.key}] {variant}"
    check_steps(where, fit, case.epochs * case.workload.batches_per_epoch, case.timed_steps, problems)
    reference = case.reference
    ours, theirs = weights(fit.net), weights(reference.net)
    difference = max_difference(ours, theirs)
    case.max_weight_diff[variant] = max(case.max_weight_diff.get(variant, 0.0), difference)
    if not weights_match(ours, theirs, case.precision.rtol, case.precision.atol):
        problems.append(f"{where}: the trained weights differ from the hand-written loop's (max |Δ| {difference:.3g})")
    if fit.scale != reference.scale:
        problems.append(
            f"{where}: the GradScaler ended at scale {fit.scale}, the hand-written loop's at {reference.scale}"
        )


def run_fit(case: Case, variant: str, root_dir: str, threads: int, problems: list[str]) -> Fit:
    h.before_run(threads)
    fit = FITTERS[variant](case.workload, case.precision, case.epochs, root_dir)
    if case.reference is None:
        case.reference = fit
    check_fit(case, variant, fit, problems)
    return fit


def measure_precision(
    case: Case, repeats: int, root_dir: str, threads: int, rng: random.Random, problems: list[str]
) -> dict[str, list[float]]:
    """Per variant, one µs-per-step sample per repeat on the harness (the raw loop's warm-up fit is the
    reference)."""
    fits = h.measure(list(FITTERS), repeats, rng, lambda variant: run_fit(case, variant, root_dir, threads, problems))
    return {variant: [fit.us_per_step for fit in runs] for variant, runs in fits.items()}


def measure_ddp(config: DDPConfig, problems: list[str]) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Start the processes, then read rank 0's samples and check what the ranks wrote: both ranks end on the same
    weights, and the Trainer's equal the hand-written loop's."""
    started = time.perf_counter()
    try:
        spawn(ddp_process, WORLD_SIZE, args=(config,))
    except Exception as error:  # a failing rank: reported with the others' problems
        problems.append(f"[ddp] the processes failed: {type(error).__name__}: {error}")
        return {RAW: [], TRACKTRAIN: []}, {}
    launch_seconds = time.perf_counter() - started
    results = [torch.load(rank_file(config, rank)) for rank in range(WORLD_SIZE)]
    for rank, result in enumerate(results):
        problems += result["problems"]
        if result["threads"] != config.threads:
            problems.append(f"[ddp] rank {rank} ran {result['threads']} torch threads, not {config.threads}")
    reference = results[0]["weights"][RAW]
    max_diff = {}
    for variant, ours in results[0]["weights"].items():
        if not all(torch.equal(a, b) for a, b in zip(ours, results[1]["weights"][variant])):
            problems.append(f"[ddp] {variant}: rank 0 and rank 1 ended with different weights")
        max_diff[variant] = difference = max_difference(ours, reference)
        if not weights_match(ours, reference, **DDP_TOLERANCE):
            problems.append(
                f"[ddp] {variant}: the trained weights differ from the hand-written DDP loop's "
                f"(max |Δ| {difference:.3g})"
            )
    return results[0]["samples_us"], {"max_weight_diff": max_diff, "launch_seconds": launch_seconds}


# ------------------------------------------------------------------------------------------------ summaries
def summarize(samples: dict[str, list[float]], statistic: str) -> dict[str, Any]:
    """The two variants' figures, the overhead (µs and % of the raw step), the noise and the goal's verdict."""
    c = h.against(samples, RAW, statistic)
    raw, overhead = c["figure"][RAW], c["difference"][TRACKTRAIN]
    noise = max(c["iqr"].values())  # what a difference of medians has to beat to mean something
    return {
        "us_per_step": c["figure"],
        "overhead_us": overhead,
        "paired_overhead_us": c["paired_difference"][TRACKTRAIN],
        "overhead_percent": overhead / raw * 100,
        "iqr_us": c["iqr"],
        "noise_us": noise,
        "goal_percent": GOAL_PERCENT,
        "goal_met": h.verdict(GOAL_PERCENT / 100 * raw - overhead, noise),
        "samples_us_per_step": samples,
    }


fmt = functools.partial(h.format_cell, decimals=1)


def weights_cell(difference: float | None) -> str:
    if difference is None:
        return "—"
    return "bit-identical" if difference == 0 else f"max abs diff {difference:.2g}"


def report(rows: list[dict[str, Any]], stat: str) -> None:
    columns = [
        ("variant", "l", lambda row: row["title"]),
        ("steps/sample", "r", lambda row: str(row["timed_steps"])),
        ("samples", "r", lambda row: str(len(row["samples_us_per_step"][TRACKTRAIN]))),
        ("raw µs/step", "r", lambda row: fmt(row["us_per_step"][RAW])),
        ("tracktrain µs/step", "r", lambda row: fmt(row["us_per_step"][TRACKTRAIN])),
        ("overhead µs", "r", lambda row: fmt(row["overhead_us"], True)),
        ("overhead %", "r", lambda row: f"{row['overhead_percent']:+.1f} %"),
        ("noise (max IQR) µs", "r", lambda row: fmt(row["noise_us"])),
        (f"goal ≤ {GOAL_PERCENT:g} %", "l", lambda row: row["goal_met"]),
        ("tracktrain weights vs raw", "l", lambda row: weights_cell(row["max_weight_diff"].get(TRACKTRAIN))),
    ]
    print("\n## Time per optimizer step, start-up and first epoch excluded\n")
    print(h.table(rows, columns) + "\n")
    print(
        f"µs/step: {stat} over the samples (one per fit: time from its second epoch's start to the run's end / the "
        "optimizer steps in between); steps/sample is that number of steps (DDP: per rank, on rank 0's clock), "
        "samples the fits per variant. overhead: tracktrain − raw, in µs per step and as a share of the raw step. "
        "noise: the larger interquartile range of the two variants' samples; differences smaller than it are not "
        "meaningful. goal: the measured overhead decides; '(within noise)' where the margin, either way, is "
        "smaller than the noise, so another run may say otherwise. weights: largest |tracktrain − raw| over all "
        "parameters after the same fit."
    )
    verdicts = [(row["key"], row["goal_met"]) for row in rows]
    goal = f"Goal (the Trainer's overhead ≤ {GOAL_PERCENT:g} % of the hand-written step)"
    print(h.goal_line(goal, verdicts, "variants"))


# ------------------------------------------------------------------------------------------------------ main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = h.make_parser(__doc__, lightning=False, stat_of="the samples")
    add = parser.add_argument
    add("--cases", default="fp32,bf16,fp16,ddp", help="comma-separated: fp32, bf16, fp16, ddp (default all)")
    add("--repeats", type=int, help="timed fits per variant of fp32, bf16 and fp16 (default 13; --quick 3)")
    add(
        "--epochs",
        type=int,
        help="epochs of a fp32 or bf16 fit, of 50 batches; the first is not timed (default 6; "
        "--quick 3, of 20 batches)",
    )
    add(
        "--fp16-epochs",
        type=int,
        help="the same for fp16, whose CPU step is ~10 × slower, on epochs of 20 batches "
        "(default 3; --quick 2, of 10 batches)",
    )
    add("--ddp-epochs", type=int, help="the same for DDP, of 50 batches, 25 per rank (default 5; --quick 2, of 20)")
    add("--ddp-repeats", type=int, help="timed fits per DDP variant, after one warm-up fit (default 20; --quick 2)")
    defaults = {
        "repeats": (13, 3),
        "epochs": (6, 3),
        "fp16_epochs": (3, 2),
        "ddp_epochs": (5, 2),
        "ddp_repeats": (20, 2),
    }
    return h.finish_args(
        parser,
        argv,
        defaults,
        positive=["repeats", "ddp_repeats", "threads"],
        at_least_two=["epochs", "fp16_epochs", "ddp_epochs"],
        cases=[*PRECISIONS, DDP],
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rng = h.prepare(args)
    wanted = args.cases.split(",")
    batches = {"medium": 20 if args.quick else 50, "fp16": 10 if args.quick else 20, DDP: 20 if args.quick else 50}
    cases = [
        Case(
            PRECISIONS[key],
            medium_data(batches["fp16" if key == "fp16" else "medium"], args.seed),
            args.fp16_epochs if key == "fp16" else args.epochs,
        )
        for key in PRECISIONS
        if key in wanted
    ]
    root_dir = tempfile.mkdtemp(prefix="tracktrain-bench-variants-")
    h.freeze_garbage()

    env = h.environment(args.threads)
    h.print_heading(
        "tracktrain Trainer step variants: cost per step on top of the hand-written loop",
        env,
        args,
        f"medium MLP {'-'.join(map(str, MEDIUM))}, batch {BATCH_SIZE}, SGD, DataLoader over a TensorDataset",
        f"{args.repeats} interleaved repeats (DDP: {args.ddp_repeats})",
    )
    problems: list[str] = []
    rows: list[dict[str, Any]] = []
    try:
        for case in cases:
            started = time.perf_counter()
            samples = measure_precision(case, args.repeats, root_dir, args.threads, rng, problems)
            row = {
                "key": case.precision.key,
                "title": TITLES[case.precision.key],
                "batches_per_epoch": case.workload.batches_per_epoch,
                "epochs": case.epochs,
                "timed_steps": case.timed_steps,
                "statistic": args.stat,
                **summarize(samples, args.stat),
                "max_weight_diff": dict(case.max_weight_diff),
                "tolerance": {"rtol": case.precision.rtol, "atol": case.precision.atol},
            }
            rows.append(row)
            print(
                f"- {row['title']} ({case.workload.batches_per_epoch} batches/epoch, fits of {case.epochs} epochs): "
                f"raw {fmt(row['us_per_step'][RAW])}, tracktrain {fmt(row['us_per_step'][TRACKTRAIN])} µs/step "
                f"[{time.perf_counter() - started:.1f} s]",
                flush=True,
            )
        if DDP in wanted:
            started = time.perf_counter()
            config = DDPConfig(
                batches[DDP],
                args.ddp_epochs,
                args.ddp_repeats,
                args.seed,
                args.threads,
                free_port(),
                tempfile.mkdtemp(prefix="ddp-", dir=root_dir),
                root_dir,
            )
            samples, checks = measure_ddp(config, problems)
            if all(samples.values()):
                row = {
                    "key": DDP,
                    "title": TITLES[DDP],
                    "batches_per_epoch": config.steps_per_epoch,
                    "epochs": config.epochs,
                    "timed_steps": config.timed_steps,
                    "statistic": args.stat,
                    **summarize(samples, args.stat),
                    **checks,
                    "tolerance": DDP_TOLERANCE,
                }
                rows.append(row)
                print(
                    f"- {row['title']} ({config.steps_per_epoch} batches/epoch per rank, fits of {config.epochs} "
                    f"epochs): raw {fmt(row['us_per_step'][RAW])}, tracktrain {fmt(row['us_per_step'][TRACKTRAIN])} "
                    f"µs/step [{time.perf_counter() - started:.1f} s]",
                    flush=True,
                )
    finally:
        shutil.rmtree(root_dir, ignore_errors=True)

    if rows:
        report(rows, args.stat)
    payload = {"environment": env, "arguments": vars(args), "goal_percent": GOAL_PERCENT, "rows": rows}
    return h.finish(args, payload, problems)


if __name__ == "__main__":
    sys.exit(main())
