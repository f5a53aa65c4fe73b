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
import gc
import math
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from _common import (
    STATISTICS, EngineClock, environment, exit_status, format_cell, goal_line, make_mlp, print_heading, quartiles, write_json,
)
from _modules import LEARNING_RATE, Classifier
from tracktrain.distributed import spawn
from tracktrain.trainer import Trainer
from tracktrain_integrations.testing import free_port

RAW, TRACKTRAIN = "raw", "tracktrain"
DDP = "ddp"
GOAL_PERCENT = 5.0  # the "within a few percent on the medium model"
MEDIUM = (256, 512, 512, 10)
BATCH_SIZE = 64
WORLD_SIZE = 2


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


# ------------------------------------------------------------------------------------------------------ setup
class Workload:
    """The medium MLP's initial weights and a synthetic in-memory TensorDataset (batches in order, no workers),
    the same in every process built with the same seed: every fit trains a fresh copy of the same weights."""

    def __init__(self, batches_per_epoch: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        samples = BATCH_SIZE * batches_per_epoch
        inputs = torch.randn(samples, MEDIUM[0], generator=generator)
        targets = torch.randint(0, MEDIUM[-1], (samples,), generator=generator)
        self.batches_per_epoch = batches_per_epoch
        self.dataset = TensorDataset(inputs, targets)
        self.loader = DataLoader(self.dataset, batch_size=BATCH_SIZE)
        torch.manual_seed(seed)
        self._initial = {name: value.clone() for name, value in make_mlp(MEDIUM).state_dict().items()}

    def fresh_net(self) -> nn.Sequential:
        net = make_mlp(MEDIUM)
        net.load_state_dict(self._initial)
        return net


@dataclass
class Fit:
    """One fit: `seconds` and `timed_steps` from the start of its second epoch to the end of the run."""

    seconds: float
    timed_steps: int
    steps: int
    net: nn.Module
    logged_loss: bool = True  # the module's self.log reached callback_metrics (the raw loop logs nothing)
    scale: float | None = None  # the GradScaler's scale at the end (fp16)

    @property
    def us_per_step(self) -> float:
        return self.seconds / self.timed_steps * 1e6


def weights(net: nn.Module) -> list[torch.Tensor]:
    return [value.detach().clone() for value in net.state_dict().values()]


def max_difference(ours: list[torch.Tensor], reference: list[torch.Tensor]) -> float:
    return max(float((a - b).abs().max()) for a, b in zip(ours, reference))


def weights_match(ours: list[torch.Tensor], reference: list[torch.Tensor], rtol: float, atol: float) -> bool:
    return all(torch.allclose(a, b, rtol=rtol, atol=atol) for a, b in zip(ours, reference))


# --------------------------------------------------------------------------------- one process: precisions
def fit_raw(workload: Workload, precision: Precision, epochs: int, root_dir: str) -> Fit:
    """The hand-written loop of `precision`, written out as a user would (no context manager or scaler where the
    precision needs none). No logging."""
    net = workload.fresh_net()
    optimizer = torch.optim.SGD(net.parameters(), lr=LEARNING_RATE)
    scaler = torch.amp.GradScaler("cpu") if precision.grad_scaler else None
    dtype = precision.autocast_dtype
    net.train()
    steps = steps_before = 0
    start = 0.0
    for epoch in range(epochs):
        if epoch == 1:
            start, steps_before = time.perf_counter(), steps
        if scaler is not None:
            for x, y in workload.loader:
                optimizer.zero_grad()
                with torch.autocast("cpu", dtype=dtype):
                    loss = F.cross_entropy(net(x), y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                steps += 1
        elif dtype is not None:
            for x, y in workload.loader:
                optimizer.zero_grad()
                with torch.autocast("cpu", dtype=dtype):
                    loss = F.cross_entropy(net(x), y)
                loss.backward()
                optimizer.step()
                steps += 1
        else:
            for x, y in workload.loader:
                optimizer.zero_grad()
                loss = F.cross_entropy(net(x), y)
                loss.backward()
                optimizer.step()
                steps += 1
    end = time.perf_counter()
    return Fit(end - start, steps - steps_before, steps, net, scale=scaler.get_scale() if scaler is not None else None)


def fit_tracktrain(workload: Workload, precision: Precision, epochs: int, root_dir: str) -> Fit:
    net = workload.fresh_net()
    trainer = Trainer(
        max_epochs=epochs, precision=precision.trainer_precision, enable_progress_bar=False,
        enable_checkpointing=False, loggers=False, default_root_dir=root_dir, accelerator="cpu",
    )
    clock = EngineClock(trainer)
    trainer.fit(Classifier(net), workload.loader)
    scaler = trainer.model_engine.scaler
    return Fit(clock.end - clock.start, trainer.global_step - clock.start_iteration, trainer.global_step, net,
               "loss" in trainer.callback_metrics, scaler.get_scale() if scaler is not None else None)


FITTERS: dict[str, Callable[[Workload, Precision, int, str], Fit]] = {RAW: fit_raw, TRACKTRAIN: fit_tracktrain}


@dataclass
class Case:
    """One precision on one workload, fits of `epochs` epochs; the raw loop's first fit is the reference every
    fit is checked against."""

    precision: Precision
    workload: Workload
    epochs: int
    reference: Fit | None = None
    max_weight_diff: dict[str, float] = field(default_factory=dict)  # variant -> largest |Δ| to the reference

    @property
    def timed_steps(self) -> int:
        return (self.epochs - 1) * self.workload.batches_per_epoch


def check_fit(case: Case, variant: str, fit: Fit, problems: list[str]) -> None:
    """After every fit, outside the timing: the steps, the weights, the logged loss, the GradScaler's scale."""
    where = f"[{case.precision.key}] {variant}"
    expected = case.epochs * case.workload.batches_per_epoch
    if fit.steps != expected or fit.timed_steps != case.timed_steps:
        problems.append(f"{where}: took {fit.steps} optimizer steps ({fit.timed_steps} timed), expected {expected} "
                        f"({case.timed_steps} timed)")
    reference = case.reference
    ours, theirs = weights(fit.net), weights(reference.net)
    difference = max_difference(ours, theirs)
    case.max_weight_diff[variant] = max(case.max_weight_diff.get(variant, 0.0), difference)
    if not weights_match(ours, theirs, case.precision.rtol, case.precision.atol):
        problems.append(f"{where}: the trained weights differ from the hand-written loop's (max |Δ| {difference:.3g})")
    if not fit.logged_loss:
        problems.append(f"{where}: the module's self.log('loss', ...) is not in trainer.callback_metrics")
    if fit.scale != reference.scale:
        problems.append(f"{where}: the GradScaler ended at scale {fit.scale}, the hand-written loop's at "
                        f"{reference.scale}")


def run_fit(case: Case, variant: str, root_dir: str, threads: int, problems: list[str]) -> Fit:
    torch.set_num_threads(threads)  # in case something changed it
    gc.collect()
    fit = FITTERS[variant](case.workload, case.precision, case.epochs, root_dir)
    if case.reference is None:
        case.reference = fit
    check_fit(case, variant, fit, problems)
    return fit


def measure_precision(
    case: Case, repeats: int, root_dir: str, threads: int, rng: random.Random, problems: list[str]
) -> dict[str, list[float]]:
    """Per variant, one µs-per-step sample per repeat, the variants in a shuffled order per repeat, after one
    untimed warm-up fit of each (the raw loop's is the reference)."""
    for variant in FITTERS:
        run_fit(case, variant, root_dir, threads, problems)
    samples: dict[str, list[float]] = {variant: [] for variant in FITTERS}
    for _ in range(repeats):
        order = list(FITTERS)
        rng.shuffle(order)  # slow drifts of the machine hit both variants alike
        for variant in order:
            samples[variant].append(run_fit(case, variant, root_dir, threads, problems).us_per_step)
    return samples


# ------------------------------------------------------------------------------------------ two processes: DDP
@dataclass(frozen=True)
class DDPConfig:
    """What the launched processes need (picklable: it travels to them). `batches_per_epoch` counts the whole
    dataset's batches; each rank reads its share."""

    batches_per_epoch: int
    epochs: int
    repeats: int
    seed: int
    threads: int
    port: int  # where the processes join the group, as a hand-written script would
    out_dir: str
    root_dir: str

    @property
    def steps_per_epoch(self) -> int:
        """Batches per epoch on each rank: a DistributedSampler gives each ceil(samples / ranks) samples."""
        return math.ceil(math.ceil(self.batches_per_epoch * BATCH_SIZE / WORLD_SIZE) / BATCH_SIZE)

    @property
    def timed_steps(self) -> int:
        return (self.epochs - 1) * self.steps_per_epoch


def fit_raw_ddp(workload: Workload, epochs: int, root_dir: str) -> Fit:
    """The hand-written DDP loop: DistributedDataParallel, this rank's shard through a DistributedSampler (in
    order, as the Trainer's is for a loader that does not shuffle), set_epoch each epoch. No logging."""
    net = workload.fresh_net()
    model = nn.parallel.DistributedDataParallel(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    sampler = DistributedSampler(workload.dataset, shuffle=False)
    loader = DataLoader(workload.dataset, batch_size=BATCH_SIZE, sampler=sampler)
    model.train()
    steps = steps_before = 0
    start = 0.0
    for epoch in range(epochs):
        if epoch == 1:
            start, steps_before = time.perf_counter(), steps
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            steps += 1
    end = time.perf_counter()
    return Fit(end - start, steps - steps_before, steps, net)


def fit_tracktrain_ddp(workload: Workload, epochs: int, root_dir: str) -> Fit:
    """`Trainer(strategy="ddp")` on the unsharded loader: it finds the process group running and shards the data."""
    net = workload.fresh_net()
    trainer = Trainer(
        max_epochs=epochs, strategy="ddp", enable_progress_bar=False, enable_checkpointing=False, loggers=False,
        default_root_dir=root_dir, accelerator="cpu",
    )
    clock = EngineClock(trainer)
    trainer.fit(Classifier(net), workload.loader)
    return Fit(clock.end - clock.start, trainer.global_step - clock.start_iteration, trainer.global_step, net,
               "loss" in trainer.callback_metrics)


DDP_FITTERS: dict[str, Callable[[Workload, int, str], Fit]] = {RAW: fit_raw_ddp, TRACKTRAIN: fit_tracktrain_ddp}


def rank_file(config: DDPConfig, rank: int) -> str:
    return os.path.join(config.out_dir, f"rank{rank}.pt")


def ddp_process(config: DDPConfig) -> None:
    """One of the processes `tracktrain.distributed.spawn` starts. It joins the group as a hand-written script
    does (gloo, 127.0.0.1, a free port; the Trainer finds it running, so its own joining, start-up only, is not
    compared), warms each variant up with one fit, then runs `repeats` rounds of one fit of each, in an order
    shuffled alike on every rank (they run the same collectives). Every rank writes its samples, the weights of
    each variant's first fit and any problem to its file; rank 0's samples are the ones reported."""
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{config.port}", rank=rank,
                            world_size=WORLD_SIZE, timeout=timedelta(minutes=5))
    torch.set_num_threads(config.threads)
    torch.set_flush_denormal(True)
    workload = Workload(config.batches_per_epoch, config.seed)
    rng = random.Random(config.seed)
    gc.collect()
    gc.freeze()  # the data and torch live to the end: keep the collections before (and in) each fit cheap
    problems: list[str] = []
    first: dict[str, list[torch.Tensor]] = {}
    samples: dict[str, list[float]] = {variant: [] for variant in DDP_FITTERS}
    for repeat in range(config.repeats + 1):  # round 0 warms up
        order = list(DDP_FITTERS)
        rng.shuffle(order)  # slow drifts of the machine hit both variants alike
        for variant in order:
            torch.set_num_threads(config.threads)
            gc.collect()
            dist.barrier()  # the ranks start each fit together
            fit = DDP_FITTERS[variant](workload, config.epochs, config.root_dir)
            where = f"[ddp] {variant} rank {rank}"
            expected = config.epochs * config.steps_per_epoch
            if fit.steps != expected or fit.timed_steps != config.timed_steps:
                problems.append(f"{where}: took {fit.steps} optimizer steps ({fit.timed_steps} timed), expected "
                                f"{expected} ({config.timed_steps} timed)")
            if not fit.logged_loss:
                problems.append(f"{where}: the module's self.log('loss', ...) is not in trainer.callback_metrics")
            trained = weights(fit.net)
            if variant not in first:
                first[variant] = trained
            elif not all(torch.equal(a, b) for a, b in zip(trained, first[variant])):
                problems.append(f"{where}: the same fit ended with other weights than its first time")
            if repeat:
                samples[variant].append(fit.us_per_step)
    torch.save({"samples_us": samples, "weights": first, "problems": problems, "threads": torch.get_num_threads()},
               rank_file(config, rank))


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
            problems.append(f"[ddp] {variant}: the trained weights differ from the hand-written DDP loop's "
                            f"(max |Δ| {difference:.3g})")
    return results[0]["samples_us"], {"max_weight_diff": max_diff, "launch_seconds": launch_seconds}


# ------------------------------------------------------------------------------------------------ summaries
def summarize(samples: dict[str, list[float]], statistic: str) -> dict[str, Any]:
    """The two variants' figures, the overhead (µs and % of the raw step), the noise and the goal's verdict."""
    center = STATISTICS[statistic]
    us_per_step = {name: center(values) for name, values in samples.items()}
    iqr = {name: q3 - q1 for name, (q1, q3) in ((name, quartiles(values)) for name, values in samples.items())}
    raw, ours = us_per_step[RAW], us_per_step[TRACKTRAIN]
    overhead = ours - raw
    noise = max(iqr.values())  # what a difference of medians has to beat to mean something
    margin = GOAL_PERCENT / 100 * raw - overhead
    goal = "yes" if margin >= 0 else "NO"
    if abs(margin) <= noise:
        goal += " (within noise)"
    # the samples of one index ran in the same round, next to each other
    paired = statistics.median(mine - hand for mine, hand in zip(samples[TRACKTRAIN], samples[RAW]))
    return {
        "us_per_step": us_per_step,
        "overhead_us": overhead,
        "paired_overhead_us": paired,
        "overhead_percent": overhead / raw * 100,
        "iqr_us": iqr,
        "noise_us": noise,
        "goal_percent": GOAL_PERCENT,
        "goal_met": goal,
        "samples_us_per_step": samples,
    }


fmt = functools.partial(format_cell, decimals=1)


def table(lines: list[list[str]], align: str) -> str:
    """A markdown table: the first line is the header; `align` has one of l / r per column."""
    rule = "|" + "|".join(":---" if side == "l" else "---:" for side in align) + "|"
    rows = ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join([rows[0], rule, *rows[1:]])


def weights_cell(difference: float | None) -> str:
    if difference is None:
        return "—"
    return "bit-identical" if difference == 0 else f"max abs diff {difference:.2g}"


def report(rows: list[dict[str, Any]], stat: str) -> None:
    lines = [[
        "variant", "steps/sample", "samples", "raw µs/step", "tracktrain µs/step", "overhead µs", "overhead %",
        "noise (max IQR) µs", f"goal ≤ {GOAL_PERCENT:g} %", "tracktrain weights vs raw",
    ]]
    for row in rows:
        lines.append([
            row["title"],
            str(row["timed_steps"]),
            str(len(row["samples_us_per_step"][TRACKTRAIN])),
            fmt(row["us_per_step"][RAW]),
            fmt(row["us_per_step"][TRACKTRAIN]),
            fmt(row["overhead_us"], True),
            f"{row['overhead_percent']:+.1f} %",
            fmt(row["noise_us"]),
            row["goal_met"],
            weights_cell(row["max_weight_diff"].get(TRACKTRAIN)),
        ])
    print("\n## Time per optimizer step, start-up and first epoch excluded\n")
    print(table(lines, "lrrrrrrrll") + "\n")
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
    print(goal_line(goal, verdicts, "variants"))


# ------------------------------------------------------------------------------------------------------ main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--quick", action="store_true", help="small counts: a smoke test, not a measurement")
    add("--cases", default="fp32,bf16,fp16,ddp", help="comma-separated: fp32, bf16, fp16, ddp (default all)")
    add("--repeats", type=int, help="timed fits per variant of fp32, bf16 and fp16 (default 13; --quick 3)")
    add("--epochs", type=int, help="epochs of a fp32 or bf16 fit, of 50 batches; the first is not timed (default 6; "
        "--quick 3, of 20 batches)")
    add("--fp16-epochs", type=int, help="the same for fp16, whose CPU step is ~10 × slower, on epochs of 20 batches "
        "(default 3; --quick 2, of 10 batches)")
    add("--ddp-epochs", type=int, help="the same for DDP, of 50 batches, 25 per rank (default 5; --quick 2, of 20)")
    add("--ddp-repeats", type=int, help="timed fits per DDP variant, after one warm-up fit (default 20; --quick 2)")
    add("--threads", type=int, default=1, help="torch.set_num_threads for every fit and process (default 1)")
    add("--stat", choices=sorted(STATISTICS), default="median",
        help="statistic of the samples to report (default median; p25 or min resist interference from other processes)")
    add("--seed", type=int, default=0, help="seed of the data and the weights, and of the shuffled orders")
    add("--json", metavar="PATH", help="also write all results (with every sample) to PATH")
    args = parser.parse_args(argv)
    defaults = {"repeats": (13, 3), "epochs": (6, 3), "fp16_epochs": (3, 2), "ddp_epochs": (5, 2),
                "ddp_repeats": (20, 2)}
    for name, (full, small) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, small if args.quick else full)
    for name in ("repeats", "ddp_repeats", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    for name in ("epochs", "fp16_epochs", "ddp_epochs"):
        if getattr(args, name) < 2:
            parser.error(f"--{name.replace('_', '-')} must be at least 2 (the first epoch is not timed), got "
                         f"{getattr(args, name)}")
    unknown = set(args.cases.split(",")) - {*PRECISIONS, DDP}
    if unknown:
        parser.error(f"--cases: unknown case(s) {sorted(unknown)}; use fp32, bf16, fp16, ddp")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    rng = random.Random(args.seed)
    wanted = args.cases.split(",")
    batches = {"medium": 20 if args.quick else 50, "fp16": 10 if args.quick else 20, DDP: 20 if args.quick else 50}
    cases = [
        Case(PRECISIONS[key], Workload(batches["fp16" if key == "fp16" else "medium"], args.seed),
             args.fp16_epochs if key == "fp16" else args.epochs)
        for key in PRECISIONS if key in wanted
    ]
    root_dir = tempfile.mkdtemp(prefix="tracktrain-bench-variants-")
    gc.collect()
    gc.freeze()  # torch, the data: out of the collector's sight, so the gc.collect() before each fit stays cheap

    env = environment(args.threads)
    print_heading(
        "tracktrain Trainer step variants: cost per step on top of the hand-written loop", env, args.threads,
        f"medium MLP {'-'.join(map(str, MEDIUM))}, batch {BATCH_SIZE}, SGD, DataLoader over a TensorDataset",
        f"{args.repeats} interleaved repeats (DDP: {args.ddp_repeats})", args.stat, args.quick,
    )
    problems: list[str] = []
    rows: list[dict[str, Any]] = []
    try:
        for case in cases:
            started = time.perf_counter()
            samples = measure_precision(case, args.repeats, root_dir, args.threads, rng, problems)
            row = {
                "key": case.precision.key, "title": TITLES[case.precision.key],
                "batches_per_epoch": case.workload.batches_per_epoch, "epochs": case.epochs,
                "timed_steps": case.timed_steps, "statistic": args.stat, **summarize(samples, args.stat),
                "max_weight_diff": dict(case.max_weight_diff),
                "tolerance": {"rtol": case.precision.rtol, "atol": case.precision.atol},
            }
            rows.append(row)
            print(f"- {row['title']} ({case.workload.batches_per_epoch} batches/epoch, fits of {case.epochs} epochs): "
                  f"raw {fmt(row['us_per_step'][RAW])}, tracktrain {fmt(row['us_per_step'][TRACKTRAIN])} µs/step "
                  f"[{time.perf_counter() - started:.1f} s]", flush=True)
        if DDP in wanted:
            started = time.perf_counter()
            config = DDPConfig(batches[DDP], args.ddp_epochs, args.ddp_repeats, args.seed, args.threads, free_port(),
                               tempfile.mkdtemp(prefix="ddp-", dir=root_dir), root_dir)
            samples, checks = measure_ddp(config, problems)
            if all(samples.values()):
                row = {
                    "key": DDP, "title": TITLES[DDP], "batches_per_epoch": config.steps_per_epoch,
                    "epochs": config.epochs, "timed_steps": config.timed_steps, "statistic": args.stat,
                    **summarize(samples, args.stat), **checks, "tolerance": DDP_TOLERANCE,
                }
                rows.append(row)
                print(f"- {row['title']} ({config.steps_per_epoch} batches/epoch per rank, fits of {config.epochs} "
                      f"epochs): raw {fmt(row['us_per_step'][RAW])}, tracktrain {fmt(row['us_per_step'][TRACKTRAIN])} "
                      f"µs/step [{time.perf_counter() - started:.1f} s]", flush=True)
    finally:
        shutil.rmtree(root_dir, ignore_errors=True)

    if rows:
        report(rows, args.stat)
    if args.json:
        write_json(args.json, {"environment": env, "arguments": vars(args), "goal_percent": GOAL_PERCENT,
                               "rows": rows, "problems": problems})
    return exit_status(problems)


if __name__ == "__main__":
    sys.exit(main())
