#!/usr/bin/env python
"""Pipeline schedules (`PipelineSchedule`: "gpipe", "1f1b", "interleaved_1f1b") on gloo ranks: time per batch and
throughput next to one process running the same model on the whole batch, and the bubble fraction each schedule
predicts next to the one measured.

The model is an `nn.Sequential` of L cost blocks (a small Linear, then a simulated compute cost: `time.sleep` in the
forward, and twice as long in the backward through a custom autograd Function). A block's cost is per sample, so a
micro-batch of b samples costs b/B of the whole batch's: one process on the whole batch of B pays L × (F + 2F), F the
forward cost of one block on the batch, exactly what the pipeline's ranks pay between them over the M micro-batches.
Sleeping costs no CPU, so on a 2-core machine the times reflect the schedule, not the ranks' contention for the cores,
and the ideal times can be computed:

- busy time per rank: (L / p) × 3F, p ranks holding L / p blocks each;
- predicted bubble (the idle fraction of each rank's step): (p − 1) / (m + p − 1) for GPipe and 1F1B, and
  (p − 1) / (v·m + p − 1) for interleaved 1F1B with v stages per rank;
- the critical path (the least time a step can take): busy / (1 − predicted bubble);
- measured bubble: 1 − busy / (the measured time per batch).

The baseline, "one process": the same L blocks, same costs, in one process with no pipeline, one forward and one
backward over the whole batch (`ModelEngine.execute_schedule` without a schedule), then the optimizer step.

    .venv/bin/python benchmarks/bench_pipeline.py --quick    # smoke test: 2 ranks, M = 4, ~25 s
    .venv/bin/python benchmarks/bench_pipeline.py            # the real run: 2 and 4 ranks, M = 4 and 8, ~2 min

Timing never makes this script fail. It exits with status 1 only when a sanity check fails: a rank failed, the
ranks did not hold every stage exactly once, the pipeline's first loss is not the one process's (the same weights
and batch), or the ranks reported different losses. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from typing import Any

import harness as h
from pipeline_fits import (
    BACKWARD_RATIO,
    WIDTH,
    PipelineConfig,
    ideal_busy_s,
    one_process,
    one_process_ideal_s,
    pipeline_process,
    predicted_bubble,
    stage_count,
)

from tracktrain.distributed import spawn
from tracktrain.engine.pipeline import SCHEDULES

fmt = functools.partial(h.format_cell, decimals=1)


# ------------------------------------------------------------------------------------------------- summaries
def summarize(
    config: PipelineConfig, base: dict[str, Any], ranks_by_world: dict[int, list[dict[str, Any]]], stat: str
) -> dict[str, Any]:
    """Per case: time per batch (per step the slowest rank's; the statistic over the steps), its ratio to the one
    process's time, the ideal ratio p × (1 − predicted bubble), the critical path, the measured bubble and the
    predicted one, and the busy time each rank measured (its sleeps; the slowest rank's)."""
    center = h.STATISTICS[stat]
    base_s = center(base["times"])
    rows: dict[str, Any] = {
        "one-process": {
            "ranks": 1,
            "stages": 1,
            "microbatches": 1,
            "batch_ms": base_s * 1e3,
            "batch_iqr_ms": h.iqr(base["times"]) * 1e3,
            "samples_ms": [value * 1e3 for value in base["times"]],
            "throughput_ratio": 1.0,
            "ideal_ratio": 1.0,
            "ideal_busy_ms": one_process_ideal_s(config) * 1e3,
            "critical_path_ms": one_process_ideal_s(config) * 1e3,
            "measured_busy_ms": center(base["busy"]) * 1e3,
            "cpu_ms": center(base["cpu"]) * 1e3,
            "measured_bubble": 1 - one_process_ideal_s(config) / base_s,
            "predicted_bubble": 0.0,
        }
    }
    for world, ranks in ranks_by_world.items():
        busy_s = ideal_busy_s(config, world)
        for schedule, m in config.cases:
            key = f"{schedule}/{m}"
            steps = [max(values) for values in zip(*(rank["times"][key] for rank in ranks))]
            measured_busy = [max(values) for values in zip(*(rank["busy"][key] for rank in ranks))]
            cpu = [max(values) for values in zip(*(rank["cpu"][key] for rank in ranks))]
            batch_s = center(steps)
            predicted = predicted_bubble(schedule, world, m)
            rows[f"{schedule}/p{world}/m{m}"] = {
                "schedule": schedule,
                "ranks": world,
                "stages": stage_count(schedule, world),
                "microbatches": m,
                "batch_ms": batch_s * 1e3,
                "batch_iqr_ms": h.iqr(steps) * 1e3,
                "samples_ms": [value * 1e3 for value in steps],
                "throughput_ratio": base_s / batch_s,
                "ideal_ratio": world * (1 - predicted),
                "ideal_busy_ms": busy_s * 1e3,
                "critical_path_ms": busy_s / (1 - predicted) * 1e3,
                "measured_busy_ms": center(measured_busy) * 1e3,
                "cpu_ms": center(cpu) * 1e3,
                "measured_bubble": 1 - busy_s / batch_s,
                "predicted_bubble": predicted,
            }
    return rows


def check_ranks(
    config: PipelineConfig, world: int, ranks: list[dict[str, Any]], base_loss: float, problems: list[str]
) -> None:
    """Every stage held by exactly one rank; the first loss is the one process's (the same weights and batch);
    every rank reported the same losses (the last stage's, broadcast)."""
    for schedule, m in config.cases:
        key = f"{schedule}/{m}"
        held = sorted(index for rank in ranks for index in rank["stages"][key])
        if held != list(range(stage_count(schedule, world))):
            problems.append(f"{key} on {world} ranks: the ranks held stages {held}")
        first = ranks[0]["first_loss"][key]
        if abs(first - base_loss) > 1e-5 * max(1.0, abs(base_loss)):
            problems.append(f"{key} on {world} ranks: first loss {first!r}, one process's {base_loss!r}")
        if any(rank["losses"][key] != ranks[0]["losses"][key] for rank in ranks):
            problems.append(f"{key} on {world} ranks: the ranks reported different losses")


# ------------------------------------------------------------------------------------------------ reporting
def report(rows: dict[str, Any], config: PipelineConfig, stat: str) -> None:
    print(f"\n## Time per batch and bubble, {' and '.join(map(str, config.world_sizes))} gloo ranks\n")
    print(f"`{h.command_line()}`\n")
    lines = [
        [
            "schedule",
            "ranks",
            "stages",
            "M",
            "ms/batch",
            "IQR ms",
            "× one process",
            "ideal ×",
            "critical path ms",
            "measured bubble",
            "predicted bubble",
            "slept ms/rank",
            "CPU ms/rank",
        ]
    ]
    for key, row in rows.items():
        lines.append(
            [
                row.get("schedule", "one process (no pipeline)"),
                str(row["ranks"]),
                str(row["stages"]),
                str(row["microbatches"]) if key != "one-process" else "—",
                fmt(row["batch_ms"]),
                fmt(row["batch_iqr_ms"]),
                f"{row['throughput_ratio']:.3f}",
                f"{row['ideal_ratio']:.3f}",
                fmt(row["critical_path_ms"]),
                f"{row['measured_bubble']:.3f}",
                f"{row['predicted_bubble']:.3f}",
                fmt(row["measured_busy_ms"]),
                fmt(row["cpu_ms"]),
            ]
        )
    print(h.markdown_table(lines, "lrrrrrrrrrrrr") + "\n")
    print(
        f"{config.blocks} cost blocks, forward {config.forward_ms:g} ms each on the batch of {config.batch_size} "
        f"(backward {BACKWARD_RATIO:g} ×), split evenly into the stages. {config.warmup} warm-up step(s) per case, "
        f"then {config.repeats} round(s) of {config.steps} steps, cases in an order shuffled per round; "
        f"ms/batch: {stat} over the steps of the slowest rank's step time. × one process: its time per batch over "
        "this one's; ideal ×: p × (1 − predicted bubble). critical path: the ideal busy time per rank, "
        "(L / p) × 3F, over 1 − predicted bubble. measured bubble: 1 − ideal busy / ms per batch. predicted: "
        "(p − 1) / (v·m + p − 1), v stages per rank (Megatron-LM, Narayanan et al. 2021). slept: the time the "
        "slowest rank actually spent in its blocks' sleeps (time.sleep overshoots); CPU: the CPU time of the busiest "
        "rank's process during the step (its threads, gloo's included): what the schedule's own work costs."
    )


# ------------------------------------------------------------------------------------------------------ main
def _int_list(text: str) -> tuple[int, ...]:
    return tuple(int(item) for item in text.split(","))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = h.make_parser(__doc__, lightning=False, stat_of="the steps")
    add = parser.add_argument
    add("--blocks", type=int, help="cost blocks in the model, L (default 8; --quick 8)")
    add("--batch-size", type=int, help="samples per batch, a multiple of every M (default 32; --quick 32)")
    add("--forward-ms", type=float, default=None, help="one block's forward cost on the batch, F (default 30)")
    add("--microbatches", help="comma-separated M values (default 4,8; --quick 4)")
    add("--world-sizes", help="comma-separated rank counts (default 2,4; --quick 2)")
    add("--schedules", default=",".join(SCHEDULES), help=f"comma-separated, of {', '.join(SCHEDULES)} (default all)")
    add("--warmup", type=int, help="untimed steps per case first (default 2; --quick 1)")
    add("--repeats", type=int, help="rounds of every case (default 3; --quick 1)")
    add("--steps", type=int, help="timed steps per case per round (default 5; --quick 3)")
    defaults = {"blocks": (8, 8), "batch_size": (32, 32), "warmup": (2, 1), "repeats": (3, 1), "steps": (5, 3)}
    args = h.finish_args(
        parser, argv, defaults, positive=["blocks", "batch_size", "warmup", "repeats", "steps", "threads"]
    )
    args.forward_ms = 30.0 if args.forward_ms is None else args.forward_ms
    args.microbatches = _int_list(args.microbatches or ("4" if args.quick else "4,8"))
    args.world_sizes = _int_list(args.world_sizes or ("2" if args.quick else "2,4"))
    args.schedules = tuple(args.schedules.split(","))
    if set(args.schedules) - set(SCHEDULES):
        parser.error(f"--schedules: unknown {sorted(set(args.schedules) - set(SCHEDULES))}; use {', '.join(SCHEDULES)}")
    for m in args.microbatches:
        if m < 1 or args.batch_size % m:
            parser.error(f"--microbatches: {m} does not split the batch of {args.batch_size} evenly")
    for world in args.world_sizes:
        most = max(stage_count(schedule, world) for schedule in args.schedules)
        if world < 2 or args.blocks % most:
            parser.error(f"--world-sizes: {world} ranks need {most} stages, a divisor of the {args.blocks} blocks")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    h.prepare(args)
    root_dir = h.temporary_root("tracktrain-bench-pipeline-")
    config = PipelineConfig(
        args.blocks,
        args.batch_size,
        args.forward_ms,
        args.microbatches,
        args.world_sizes,
        args.schedules,
        args.warmup,
        args.repeats,
        args.steps,
        args.seed,
        args.threads,
        root_dir,
    )
    env = h.environment(args.threads)
    h.print_heading(
        "tracktrain pipeline schedules: time per batch and bubble, next to one process",
        env,
        args,
        "gloo",
        f"{args.repeats} round(s) of {args.steps} steps per case",
    )
    print(
        f"- {config.blocks} blocks (Linear({WIDTH}, {WIDTH}), tanh, sleep {config.forward_ms:g} ms forward and "
        f"{config.forward_ms * BACKWARD_RATIO:g} ms backward per batch of {config.batch_size}, in proportion per "
        f"micro-batch); one process: {one_process_ideal_s(config) * 1e3:.0f} ms of sleeps per batch",
        flush=True,
    )
    problems: list[str] = []
    started = time.perf_counter()
    base = one_process(config)
    print(f"  [one process: {time.perf_counter() - started:.1f} s]", flush=True)
    ranks_by_world: dict[int, list[dict[str, Any]]] = {}
    for world in config.world_sizes:
        started = time.perf_counter()
        try:
            spawn(pipeline_process, world, args=(config, world))
        except Exception as error:  # a failing rank: reported with the other problems
            problems.append(f"[{world} ranks] the processes failed: {type(error).__name__}: {error}")
            continue
        print(f"  [{world} ranks: {time.perf_counter() - started:.1f} s]", flush=True)
        ranks = []
        for rank in range(world):
            with open(os.path.join(root_dir, f"world{world}_rank{rank}.json"), encoding="utf-8") as handle:
                ranks.append(json.load(handle))
        check_ranks(config, world, ranks, base["first_loss"], problems)
        ranks_by_world[world] = ranks
    rows = summarize(config, base, ranks_by_world, args.stat)
    report(rows, config, args.stat)
    payload = {
        "environment": env,
        "arguments": {key: list(value) if isinstance(value, tuple) else value for key, value in vars(args).items()},
        "workload": {
            "blocks": config.blocks,
            "batch_size": config.batch_size,
            "forward_ms": config.forward_ms,
            "backward_ratio": BACKWARD_RATIO,
            "width": WIDTH,
        },
        "results": rows,
    }
    return h.finish(args, payload, problems)


if __name__ == "__main__":
    sys.exit(main())
