#!/usr/bin/env python
"""Pipeline schedules (`PipelineSchedule`: "gpipe", "1f1b", "interleaved_1f1b") on gloo ranks: time per batch and
throughput next to one process running the same model on the whole batch, and the bubble fraction each schedule
predicts next to the one measured.

The model (sleep-based cost blocks), the ideal times and the bubble formulas are in benchmarks/README.md; the runs in
pipeline_fits.py.

    .venv/bin/python benchmarks/bench_pipeline.py --quick    # smoke test: 2 ranks, M = 4, ~25 s
    .venv/bin/python benchmarks/bench_pipeline.py            # the real run: 2 and 4 ranks, M = 4 and 8, ~2 min

Timing never makes this script fail. It exits with status 1 only when a sanity check fails: a rank failed, the
ranks did not hold every stage exactly once, the pipeline's first loss is not the one process's (the same weights
and batch), or the ranks reported different losses. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
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
from ranks import launch

from tracktrain.engine.pipeline import SCHEDULES


def summarize(
    config: PipelineConfig, base: dict[str, Any], ranks_by_world: dict[int, list[dict[str, Any]]], stat: str
) -> list[dict[str, Any]]:
    """Time per batch of each case (per step the slowest rank's) next to the one process's; as columns its ranks,
    stages and micro-batches, the ideal ratio to one process (1 / (p × (1 − predicted bubble))), the critical path,
    the measured and the predicted bubble, and what the slowest rank slept and its CPU time."""
    center = h.STATISTICS[stat]
    one = one_process_ideal_s(config) * 1e3
    samples = {"one-process": [value * 1e3 for value in base["times"]]}
    extra: dict[str, dict[str, Any]] = {
        "ranks": {"one-process": 1}, "stages": {"one-process": 1}, "M": {"one-process": 1},
        "ideal_ratio": {"one-process": 1.0}, "critical_path_ms": {"one-process": one},
        "predicted_bubble": {"one-process": 0.0}, "measured_bubble": {"one-process": 1 - one / center(samples["one-process"])},
        "slept_ms": {"one-process": center(base["busy"]) * 1e3}, "cpu_ms": {"one-process": center(base["cpu"]) * 1e3},
    }  # fmt: skip
    for world, ranks in ranks_by_world.items():
        busy = ideal_busy_s(config, world) * 1e3
        for schedule, m in config.cases:
            key, name = f"{schedule}/{m}", f"{schedule}/p{world}/m{m}"
            slowest = {
                what: [max(v) for v in zip(*(rank[what][key] for rank in ranks))] for what in ("times", "busy", "cpu")
            }
            samples[name] = [value * 1e3 for value in slowest["times"]]
            predicted = predicted_bubble(schedule, world, m)
            for column, value in (
                ("ranks", world), ("stages", stage_count(schedule, world)), ("M", m),
                ("ideal_ratio", 1 / (world * (1 - predicted))), ("critical_path_ms", busy / (1 - predicted)),
                ("predicted_bubble", predicted), ("measured_bubble", 1 - busy / center(samples[name])),
                ("slept_ms", center(slowest["busy"]) * 1e3), ("cpu_ms", center(slowest["cpu"]) * 1e3),
            ):  # fmt: skip
                extra[column][name] = value
    return h.compare("time per batch", samples, "one-process", "ms", stat, **extra)


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


# ------------------------------------------------------------------------------------------------------ main
def _int_list(text: str) -> tuple[int, ...]:
    return tuple(int(item) for item in text.split(","))


def parse_args(argv: list[str] | None) -> Any:
    def options(add: Any) -> None:
        add("--forward-ms", type=float, default=30.0, help="one block's forward cost on the batch, F (default 30)")
        add("--microbatches", help="comma-separated M values (default 4,8; --quick 4)")
        add("--world-sizes", help="comma-separated rank counts (default 2,4; --quick 2)")
        add("--schedules", default=",".join(SCHEDULES), help=f"comma-separated, of {', '.join(SCHEDULES)}")

    counts = {
        "blocks": (8, 8, "cost blocks in the model, L"),
        "batch_size": (32, 32, "samples per batch, a multiple of every M"),
        "warmup": (2, 1, "untimed steps per case first"),
        "repeats": (3, 1, "rounds of every case"),
        "steps": (5, 3, "timed steps per case per round"),
    }
    args = h.parse(
        __doc__, argv, counts, options=options, positive=[*counts, "threads"], lightning=False, stat_of="the steps"
    )
    parser = argparse.ArgumentParser()
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
    env = h.start(
        "tracktrain pipeline schedules: time per batch and bubble, next to one process",
        args,
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
        ranks, seconds = launch(pipeline_process, world, (config, world), root_dir, f"world{world}", problems)
        if not ranks:
            continue
        print(f"  [{world} ranks: {seconds:.1f} s]", flush=True)
        check_ranks(config, world, ranks, base["first_loss"], problems)
        ranks_by_world[world] = ranks
    rows = summarize(config, base, ranks_by_world, args.stat)
    h.report(
        rows,
        "ranks",
        "stages",
        "M",
        "ideal_ratio",
        "critical_path_ms",
        "predicted_bubble",
        "measured_bubble",
        "slept_ms",
        "cpu_ms",
        decimals=3,
    )
    print(
        f"{config.blocks} cost blocks, forward {config.forward_ms:g} ms each on the batch of {config.batch_size} "
        f"(backward {BACKWARD_RATIO:g} ×), split evenly into the stages; per step the slowest rank's time. "
        "ideal_ratio: 1 / (p × (1 − predicted bubble)); critical path: (L / p) × 3F / (1 − predicted bubble); "
        "measured bubble: 1 − ideal busy time / ms per batch; predicted: (p − 1) / (v·m + p − 1), v stages per rank "
        "(Megatron-LM); slept: the slowest rank's time in its sleeps; cpu: the busiest rank's CPU time per step."
    )
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
        "rows": rows,
    }
    return h.finish(args, payload, problems)


if __name__ == "__main__":
    sys.exit(main())
