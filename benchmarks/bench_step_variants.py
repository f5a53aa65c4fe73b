#!/usr/bin/env python
"""Per-step cost of tracktrain's Trainer step variants (fp32, bf16-mixed, 16-mixed, DDP on 2 gloo processes) next
to the same variant written by hand, on the medium MLP: each a pair doing the same arithmetic on the same data from
the same weights, interleaved in the same process(es). A sample is one fit's time per optimizer step from its
second epoch's start to the run's end (rank 0's clock for DDP). The goal: the Trainer adds at most 5 % to the
hand-written step. The variants are in step_fits.py and benchmarks/README.md.

    .venv/bin/python benchmarks/bench_step_variants.py --quick      # smoke test, ~20 s
    .venv/bin/python benchmarks/bench_step_variants.py              # the real run, ~2 min on 2 cores

Timing never makes this script fail; it exits with status 1 when a fit took the wrong number of optimizer steps,
its weights differ from the hand-written loop's (fp32 and DDP: rtol 1e-5; bf16 and fp16: rtol 1e-2, atol 1e-4),
the Trainer's GradScaler ended at another scale, the module's logged loss is missing, or the DDP ranks disagree.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import harness as h
import torch
from ranks import launch, trained_weights
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
)
from workloads import ClassifierData, check_steps, max_difference, weights, weights_match

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
    """Rank 0's samples; the checks: both ranks end on the same weights, the Trainer's those of the hand-written loop."""
    ranks, seconds = launch(ddp_process, WORLD_SIZE, (config,), config.out_dir, "ddp", problems, config.threads)
    if not ranks:
        return {RAW: [], TRACKTRAIN: []}, {}
    max_diff = trained_weights(ranks, RAW, "[ddp]", problems, lambda a, b: weights_match(a, b, **DDP_TOLERANCE))
    return ranks[0]["samples_us"], {"max_weight_diff": max_diff, "launch_seconds": seconds}


def pair_rows(key: str, steps: int, samples: dict[str, list[float]], diff: float | None, stat: str) -> list:
    """The Trainer's µs per step next to the hand-written one's, with the goal and how far its weights ended."""
    goal = h.ratio_goal(samples, RAW, TRACKTRAIN, 1 + GOAL_PERCENT / 100, stat)
    case = f"{TITLES[key]}, {steps} steps/sample"
    return h.compare(case, samples, RAW, "µs/step", stat, weight_diff={TRACKTRAIN: diff}, **goal)


def main(argv: list[str] | None = None) -> int:
    args = h.parse(
        __doc__,
        argv,
        {
            "repeats": (13, 3, "timed fits per variant of fp32, bf16 and fp16"),
            "epochs": (6, 3, "epochs of a fp32 or bf16 fit, of 50 batches (--quick 20); the first is not timed"),
            "fp16_epochs": (3, 2, "the same for fp16 (a CPU step ~10 × slower), of 20 batches (--quick 10)"),
            "ddp_epochs": (5, 2, "the same for DDP, of 50 batches, 25 per rank (--quick 20)"),
            "ddp_repeats": (20, 2, "timed fits per DDP variant, after one warm-up fit"),
        },
        options=lambda add: add("--cases", default="fp32,bf16,fp16,ddp", help="comma-separated: fp32, bf16, fp16, ddp"),
        positive=["repeats", "ddp_repeats", "threads"],
        at_least_two=["epochs", "fp16_epochs", "ddp_epochs"],
        cases=[*PRECISIONS, DDP],
        lightning=False,
        stat_of="the samples",
    )
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
    root_dir = h.temporary_root("tracktrain-bench-variants-")
    h.freeze_garbage()

    env = h.start(
        "tracktrain Trainer step variants: cost per step on top of the hand-written loop",
        args,
        f"{args.repeats} interleaved repeats (DDP: {args.ddp_repeats})",
    )
    print(f"- medium MLP {'-'.join(map(str, MEDIUM))}, batch {BATCH_SIZE}, SGD, DataLoader over a TensorDataset\n")
    problems: list[str] = []
    rows: list[dict[str, Any]] = []
    for case in cases:
        started = time.perf_counter()
        samples = measure_precision(case, args.repeats, root_dir, args.threads, rng, problems)
        diff = case.max_weight_diff.get(TRACKTRAIN)
        rows += pair_rows(case.precision.key, case.timed_steps, samples, diff, args.stat)
        print(
            f"- {case.precision.key}: {case.workload.batches_per_epoch} batches/epoch, fits of {case.epochs} "
            f"epochs [{time.perf_counter() - started:.1f} s]",
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
            tempfile.mkdtemp(prefix="ddp-", dir=root_dir),
            root_dir,
        )
        samples, checks = measure_ddp(config, problems)
        if all(samples.values()):
            diff = checks["max_weight_diff"].get(TRACKTRAIN)
            rows += pair_rows(DDP, config.timed_steps, samples, diff, args.stat)
            print(
                f"- ddp: {config.steps_per_epoch} batches/epoch per rank, fits of {config.epochs} epochs "
                f"[{time.perf_counter() - started:.1f} s]",
                flush=True,
            )

    h.report(rows, "goal", "weight_diff", decimals=1)
    print("weight_diff: the largest |tracktrain − raw| of a parameter after the same fit.")
    if h.goals(rows):
        goal = f"Goal (the Trainer's overhead ≤ {GOAL_PERCENT:g} % of the hand-written step)"
        print(h.goal_line(goal, h.goals(rows), "variants"))
    payload = {"environment": env, "arguments": vars(args), "goal_percent": GOAL_PERCENT, "rows": rows}
    return h.finish(args, payload, problems)


if __name__ == "__main__":
    sys.exit(main())
