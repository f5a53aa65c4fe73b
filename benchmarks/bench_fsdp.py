#!/usr/bin/env python
"""What `Trainer(strategy="fsdp")` costs per step on top of a hand-written FSDP2 loop on 2 gloo ranks, and how much
memory per rank FSDP saves next to DDP.

1. Step overhead. 2 gloo processes on the CPU, one thread each, started by `tracktrain.distributed.spawn`, join the
   group; in them, interleaved in the same processes, fits of the same block stack (4 blocks of Linear(256,1024) /
   GELU / Linear(1024,256) with residuals in an nn.ModuleList, then a Linear head; cross-entropy, AdamW) from the
   same initial weights on the same data, each rank's half read in order through a DistributedSampler:
   - raw: the hand-written FSDP2 loop: `fully_shard` on each block, then on the root;
   - tracktrain: `Trainer(strategy="fsdp")` (its default sharding: each block of the ModuleList, then the root);
   - lightning (when installed): Lightning's `ModelParallelStrategy` with data parallelism over both ranks, which
     is its FSDP2 strategy (its `strategy="fsdp"` is FSDP1) and works on CPU/gloo; `configure_model` shards as
     the raw loop does.
   One sample is one fit's time per step from its second epoch's start to the run's end, on rank 0's clock (and
   rank 0's CPU time over the same span, which leaves out waiting for the other rank or a core). The project's
   goal: the Trainer adds at most 2 % to the hand-written FSDP2 step.
2. Peak memory per rank. `Trainer(strategy="ddp")`, `Trainer(strategy="fsdp")` and the raw FSDP2 loop fit a
   64 MiB block stack (8 blocks of 1024/1024) with AdamW for a few steps on 2 ranks. Torch's CPU allocations are
   not Python's (no tracemalloc) and torch 2.13 has no CPU allocator statistics, so a rank's figure is its peak
   RSS (VmHWM, reset through /proc/self/clear_refs just before the model is built) minus its RSS at that moment:
   the model, the wrapper's buffers, gradients, AdamW's state and the activations. Under two malloc settings:
   `live` (MALLOC_MMAP_THRESHOLD_=65536: every tensor mapped on its own and unmapped when freed, so the RSS follows
   the live tensors; the variants run in turn in one launch) and `default` (glibc's own: freed memory stays in the
   process, as in a user's run; one fresh launch per variant). A launch first fits its variants on a tiny stack,
   unmeasured (one-time allocations). Per rank, parameters + gradients + AdamW's state are 4 × the parameters
   under DDP (plus DDP's gradient buckets, another copy), 4 × the rank's half under FSDP.

    .venv/bin/python benchmarks/bench_fsdp.py --quick      # smoke test, ~60 s on 2 busy cores
    .venv/bin/python benchmarks/bench_fsdp.py              # the real run, ~10 min on 2 busy cores

Timing and memory never make this script fail. It exits with status 1 only when a sanity check fails: a fit took
the wrong number of steps, a rank does not hold half of the parameters under FSDP, the Trainer's (or Lightning's)
trained weights differ from the hand-written loop's by more than 1e-5, the ranks disagree, a repeated fit ends
elsewhere, the memory variants trained different weights, or a fit did not raise the peak RSS. See README.md.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import harness as h
import torch
from fsdp_fits import (
    DDP,
    FSDP,
    LIGHTNING,
    MALLOC_MODES,
    MMAP_THRESHOLD,
    RAW,
    RAW_FSDP,
    SHARED_LAUNCH,
    TRACKTRAIN,
    WORLD_SIZE,
    MemoryConfig,
    Shape,
    StepConfig,
    check_memory_launch,
    launch_memory,
    rank_file,
    step_process,
)
from workloads import load_peer, max_difference

from tracktrain.distributed import spawn

GOAL_PERCENT = 2.0  # issue 21: "tracktrain step vs a hand-written FSDP2 loop on the same model — overhead ≤ 2 %"
WEIGHT_TOLERANCE = 1e-5  # largest |Δ| of any trained weight to the hand-written loop's
STEP_SHAPE = Shape(width=256, hidden=1024, blocks=4)
MEMORY_SHAPE = Shape(width=1024, hidden=1024, blocks=8)
MEMORY_VARIANTS = [DDP, FSDP, RAW_FSDP]
TITLES = {RAW: "hand-written FSDP2 loop", TRACKTRAIN: 'Trainer(strategy="fsdp")', LIGHTNING: "Lightning FSDP2"}
MEMORY_TITLES = {DDP: 'Trainer(strategy="ddp")', FSDP: TITLES[TRACKTRAIN], RAW_FSDP: TITLES[RAW]}
MIB = 2**20
fmt = functools.partial(h.format_cell, decimals=1)


# ------------------------------------------------------------------------------------------------ step overhead
def measure_steps(config: StepConfig, problems: list[str]) -> dict[str, Any]:
    """Launch the timing processes, then check what the ranks wrote: the same weights on both, each holding half
    of every variant's parameters, the Trainer's and Lightning's weights within 1e-5 of the raw loop's."""
    started = time.perf_counter()
    try:
        spawn(step_process, WORLD_SIZE, args=(config,))
    except Exception as error:  # a failing rank: reported with the others' problems
        problems.append(f"[step] the processes failed: {type(error).__name__}: {error}")
        return {}
    launch_seconds = time.perf_counter() - started
    results = [torch.load(rank_file(config.out_dir, rank)) for rank in range(WORLD_SIZE)]
    for rank, result in enumerate(results):
        problems += result["problems"]
        if result["threads"] != config.threads:
            problems.append(f"[step] rank {rank} ran {result['threads']} torch threads, not {config.threads}")
        for variant, share in result["local_share"].items():
            if abs(share - 1 / WORLD_SIZE) > 0.01:
                problems.append(f"[step] {variant} rank {rank} holds {share:.3f} of the parameters, not 1/{WORLD_SIZE}")
    reference = results[0]["weights"][RAW]
    max_diff = {}
    for variant, ours in results[0]["weights"].items():
        if not all(torch.equal(a, b) for a, b in zip(ours, results[1]["weights"][variant])):
            problems.append(f"[step] {variant}: rank 0 and rank 1 ended with different weights")
        max_diff[variant] = difference = max_difference(ours, reference)
        if difference > WEIGHT_TOLERANCE:
            problems.append(
                f"[step] {variant}: the trained weights differ from the hand-written FSDP2 loop's by up to "
                f"{difference:.3g} (tolerance {WEIGHT_TOLERANCE:g})"
            )
    return {
        "samples_us_per_step": results[0]["samples_us"],
        "cpu_samples_us_per_step": results[0]["cpu_samples_us"],
        "max_weight_diff": max_diff,
        "local_share": results[0]["local_share"],
        "launch_seconds": launch_seconds,
    }


def summarize_steps(samples: dict[str, list[float]], statistic: str) -> dict[str, Any]:
    """Each variant's figure; the ratios to the raw loop (of the figures, and the median of the per-round ratios,
    whose drift the variants of a round share); the Trainer's overhead, the noise and the goal's verdict."""
    c = h.against(samples, RAW, statistic)
    overhead_percent = (c["ratio"][TRACKTRAIN] - 1) * 100
    noise_percent = max(c["iqr"][RAW], c["iqr"][TRACKTRAIN]) / c["figure"][RAW] * 100
    return {
        "us_per_step": c["figure"],
        "ratio": c["ratio"],
        "paired_ratio": c["paired_ratio"],
        "overhead_percent": overhead_percent,
        "iqr_us": c["iqr"],
        "noise_percent": noise_percent,
        "goal_percent": GOAL_PERCENT,
        "goal_met": h.verdict(GOAL_PERCENT - overhead_percent, noise_percent),
    }


def report_steps(row: dict[str, Any], stat: str) -> None:
    names = [name for name in (RAW, TRACKTRAIN, LIGHTNING) if name in row["us_per_step"]]
    cpu = row["cpu"]

    def ratio(values: dict[str, float]) -> Callable[[str], str]:
        return lambda name: "1" if name == RAW else f"{values[name]:.3f}"

    def weights_cell(name: str) -> str:
        difference = row["max_weight_diff"].get(name)
        return "—" if name == RAW else ("bit-identical" if difference == 0 else f"max abs diff {difference:.2g}")

    columns = [
        ("variant", "l", TITLES.get),
        ("µs/step", "r", lambda name: fmt(row["us_per_step"][name])),
        ("IQR µs", "r", lambda name: fmt(row["iqr_us"][name])),
        ("ratio to raw", "r", ratio(row["ratio"])),
        ("paired ratio", "r", ratio(row["paired_ratio"])),
        ("CPU µs/step", "r", lambda name: fmt(cpu["us_per_step"][name])),
        ("CPU paired ratio", "r", ratio(cpu["paired_ratio"])),
        ("weights vs raw", "l", weights_cell),
    ]
    print(f"\n## FSDP2 step on {WORLD_SIZE} gloo ranks, start-up and first epoch excluded\n")
    print(h.table(names, columns) + "\n")
    print(
        f"{row['timed_steps']} timed steps per sample ({row['steps_per_epoch']} per epoch per rank, batch "
        f"{row['batch_size']} per rank), {len(row['samples_us_per_step'][RAW])} samples per variant. µs/step: {stat} "
        "over the samples (rank 0's clock). ratio: the figure over the raw loop's; paired ratio: the median of the "
        "ratios within each round (the variants of a round ran next to each other). Overhead of the Trainer: "
        f"{row['overhead_percent']:+.2f} %, noise (the larger IQR of raw and tracktrain, as a share of the raw "
        f"step) {row['noise_percent']:.2f} %. CPU: the same for rank 0's CPU time (all its threads), which leaves "
        "out the time it waits for the other rank or for a core: the Trainer's CPU overhead "
        f"{cpu['overhead_percent']:+.2f} % (noise {cpu['noise_percent']:.2f} %)."
    )
    print(
        h.goal_line(
            f"Goal (the Trainer's FSDP step ≤ {GOAL_PERCENT:g} % over the hand-written one)",
            [("fsdp", row["goal_met"])],
        )
    )


# ------------------------------------------------------------------------------------------------------ memory
def measure_memory(
    config: MemoryConfig, modes: list[str], variants: list[str], repeats: int, rng: Any, problems: list[str]
) -> dict:
    """`repeats` rounds, each of the launches of every mode in a shuffled order (the variants' order in a shared
    launch shuffled too); per fit the larger of the ranks' figures; the ratios to DDP's in the same mode."""
    units: list[tuple[str, tuple[str, ...]]] = []
    for mode in modes:
        units += [(mode, tuple(variants))] if SHARED_LAUNCH[mode] else [(mode, (variant,)) for variant in variants]
    launches: dict[tuple[str, str], list[list[dict[str, Any]]]] = {(m, v): [] for m in modes for v in variants}
    for _, (mode, unit) in h.interleaved(units, repeats, rng):
        order = list(unit)
        rng.shuffle(order)
        try:
            fits = launch_memory(config, mode, order)
        except Exception as error:  # a failing rank
            problems.append(f"[memory] {mode} {order}: the processes failed: {type(error).__name__}: {error}")
            continue
        for variant, ranks in fits.items():
            problems += check_memory_launch(config, mode, variant, ranks)
            launches[mode, variant].append(ranks)
    checksums = {f"{mode} {variant}": runs[0][0]["checksum"] for (mode, variant), runs in launches.items() if runs}
    values = list(checksums.values())
    if values and max(values) - min(values) > 1e-6 * max(1.0, abs(values[0])):
        problems.append(f"[memory] the variants trained different weights (checksums {checksums})")
    result: dict[str, Any] = {"checksums": checksums}
    for mode in modes:
        rows: dict[str, Any] = {}
        for variant in variants:
            runs = launches[mode, variant]
            if not runs:
                continue
            peaks = [max(r["peak"] - r["rss_before"] for r in ranks) / MIB for ranks in runs]
            local = runs[0][0]["local_parameter_bytes"]
            rows[variant] = {
                "peak_growth_mib": statistics.median(peaks),
                "peak_growth_samples_mib": peaks,
                "built_growth_mib": statistics.median(
                    max(r["rss_built"] - r["rss_before"] for r in ranks) / MIB for ranks in runs
                ),
                "state_mib": (2 * local + runs[0][0]["optimizer_state_bytes"]) / MIB,  # params, grads, AdamW
            }
        for row in rows.values():
            row["peak_ratio_to_ddp"] = row["peak_growth_mib"] / rows[DDP]["peak_growth_mib"] if DDP in rows else None
            row["state_ratio_to_ddp"] = row["state_mib"] / rows[DDP]["state_mib"] if DDP in rows else None
        result[mode] = rows
    return result


def report_memory(summary: dict[str, Any], config: MemoryConfig, modes: list[str], repeats: int) -> None:
    print(f"\n## Peak memory per rank, {WORLD_SIZE} gloo ranks\n")
    print(f"{config.shape.describe()}; AdamW, batch {config.batch_size} per rank, {config.steps} steps.\n")
    lines = [["malloc", "variant", "peak growth MiB", "samples", "model built MiB", "params+grads+AdamW MiB"]]
    lines[0] += ["peak vs DDP", "state vs DDP"]
    for mode in modes:
        for variant, row in summary[mode].items():
            ratios = [row["peak_ratio_to_ddp"], row["state_ratio_to_ddp"]]
            lines.append(
                [
                    mode,
                    MEMORY_TITLES[variant],
                    fmt(row["peak_growth_mib"]),
                    " ".join(f"{value:.0f}" for value in row["peak_growth_samples_mib"]),
                    fmt(row["built_growth_mib"]),
                    fmt(row["state_mib"]),
                ]
                + ["—" if ratio is None else f"{ratio:.2f}" for ratio in ratios]
            )
    print(h.markdown_table(lines, "llrrrrrr") + "\n")
    print(
        "peak growth: a rank's peak RSS minus its RSS just before the model was built, the larger of the 2 ranks, "
        f"median of {repeats} fit(s) (samples). malloc: `live` sets {MMAP_THRESHOLD}=65536, so that every tensor of "
        "64 KiB or more is mapped on its own and returned to the system when freed (the RSS follows the live "
        "tensors; the variants run in turn in one launch, the peak reset before each); `default` keeps glibc's "
        "settings, under which freed memory stays in the process for reuse, as in a user's run (one fresh launch "
        "per variant). model built: the RSS the full model added before wrapping (every variant builds it "
        "whole on each rank). params+grads+AdamW: the rank's parameters, as many gradients and AdamW's state, "
        "counted from the tensors: 1/2 under FSDP. DDP also keeps its gradient buckets (another copy of the "
        "gradients); FSDP gathers one or two blocks at a time. (Informational only: memory never fails this script.)"
    )


# ------------------------------------------------------------------------------------------------------ main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = h.make_parser(__doc__, stat_of="the samples")
    add = parser.add_argument
    add("--cases", default="step,memory", help="comma-separated: step, memory (default both)")
    add("--repeats", type=int, help="timed fits per step variant, after one warm-up fit (default 12; --quick 2)")
    add("--epochs", type=int, help="epochs of a timed fit; the first is not timed (default 3; --quick 2)")
    add("--batches", type=int, help="batches per epoch per rank, of 32 samples (default 20; --quick 4)")
    add("--memory-repeats", type=int, help="fits per memory variant and malloc mode (default 3; --quick 1)")
    add("--memory-steps", type=int, help="steps of a memory fit (default 4; --quick 2)")
    add("--malloc", help="comma-separated malloc modes of the memory runs: live, default (default both; --quick live)")
    defaults = {
        "repeats": (12, 2),
        "epochs": (3, 2),
        "batches": (20, 4),
        "memory_repeats": (3, 1),
        "memory_steps": (4, 2),
    }
    args = h.finish_args(
        parser,
        argv,
        defaults,
        positive=["repeats", "batches", "memory_repeats", "memory_steps", "threads"],
        at_least_two=["epochs"],
        cases=["step", "memory"],
    )
    if args.malloc is None:
        args.malloc = "live" if args.quick else "live,default"
    unknown = set(args.malloc.split(",")) - set(MALLOC_MODES)
    if unknown:
        parser.error(f"--malloc: unknown mode(s) {sorted(unknown)}; use {', '.join(MALLOC_MODES)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rng = h.prepare(args)
    wanted = args.cases.split(",")
    lightning, lightning_version = (
        (None, "not run")
        if "step" not in wanted
        else load_peer("lightning", "lightning.pytorch.strategies", skip=args.no_lightning)
    )
    root_dir = h.temporary_root("tracktrain-bench-fsdp-")
    env = h.environment(args.threads, lightning=lightning_version)
    h.print_heading(
        'tracktrain Trainer(strategy="fsdp"): step overhead next to hand-written FSDP2, memory next to DDP',
        env,
        args,
        f"lightning {lightning_version}",
        f"{args.repeats} interleaved repeats (memory: {args.memory_repeats} fit(s) per variant and malloc mode)",
    )
    problems: list[str] = []
    payload: dict[str, Any] = {"environment": env, "arguments": vars(args), "goal_percent": GOAL_PERCENT}
    if "step" in wanted:
        started = time.perf_counter()
        batch_size = 32
        config = StepConfig(
            STEP_SHAPE,
            args.batches * batch_size * WORLD_SIZE,
            batch_size,
            args.epochs,
            args.repeats,
            args.seed,
            args.threads,
            tempfile.mkdtemp(prefix="step-", dir=root_dir),
            root_dir,
            lightning is not None,
        )
        print(f"- step: {STEP_SHAPE.describe()}, cross-entropy, AdamW", flush=True)
        checks = measure_steps(config, problems)
        if checks:
            row = {
                "shape": STEP_SHAPE.describe(),
                "batch_size": batch_size,
                "steps_per_epoch": config.steps_per_epoch,
                "epochs": config.epochs,
                "timed_steps": config.timed_steps,
                "statistic": args.stat,
                **summarize_steps(checks["samples_us_per_step"], args.stat),
                "cpu": summarize_steps(checks["cpu_samples_us_per_step"], args.stat),
                **checks,
            }
            payload["step"] = row
            print(f"  [{time.perf_counter() - started:.1f} s]", flush=True)
            report_steps(row, args.stat)
    if "memory" in wanted:
        started = time.perf_counter()
        config = MemoryConfig(
            MEMORY_SHAPE,
            16,
            args.memory_steps,
            args.seed,
            args.threads,
            tempfile.mkdtemp(prefix="memory-", dir=root_dir),
            root_dir,
        )
        print(f"\n- memory: {MEMORY_SHAPE.describe()}", flush=True)
        modes = args.malloc.split(",")
        variants = [DDP, FSDP] if args.quick else MEMORY_VARIANTS  # --quick: 2 launches
        summary = measure_memory(config, modes, variants, args.memory_repeats, rng, problems)
        payload["memory"] = {"shape": MEMORY_SHAPE.describe(), "steps": config.steps, "modes": modes, **summary}
        print(f"  [{time.perf_counter() - started:.1f} s]", flush=True)
        report_memory(summary, config, modes, args.memory_repeats)
    return h.finish(args, payload, problems)


if __name__ == "__main__":
    sys.exit(main())
