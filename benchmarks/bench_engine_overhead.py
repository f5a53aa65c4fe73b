#!/usr/bin/env python
"""Per-iteration overhead of tracktrain's Engine next to a hand-written loop, PyTorch-Ignite and Lightning; and what
metrics and a progress bar cost on top of each engine ((the engine with them) − (the same engine without them)),
next to Ignite's. The cases are in engine_cases.py and engine_addons.py, and in benchmarks/README.md.

    .venv/bin/python benchmarks/bench_engine_overhead.py --quick      # smoke test, ~40 s
    .venv/bin/python benchmarks/bench_engine_overhead.py              # the real run, ~3 min on 2 cores

Timing never makes this script fail; it exits with status 1 when an engine did not run the expected number of
iterations, tracktrain's handlers did not fire as often as Ignite's, the two libraries' metrics computed different
values, or a progress bar meant to draw on the terminal wrote nothing.
"""

from __future__ import annotations

import random
import sys
import time
from typing import Any

import harness as h
from engine_addons import metrics_case, pbar_case
from engine_cases import (
    IGNITE,
    IGNITE_STATUS,
    KINDS,
    RAW,
    TRACKTRAIN,
    Case,
    Workload,
    ignite,
    noop_cases,
    training_cases,
)
from workloads import load_peer

GOAL_RATIO = 0.5  # the project's goal: tracktrain's overhead <= GOAL_RATIO x Ignite's, measured in the same run
ADDON_GOAL_RATIO = 1.0  # for metrics and the progress bar: tracktrain's cost <= Ignite's
CASES = [f"tiny-{kind}" for kind in (*KINDS, "metrics", "pbar")] + ["noop", "noop-handlers"]


def measure_case(case: Case, repeats: int, threads: int, rng: random.Random, problems: list[str]) -> dict:
    """On the harness: a warm-up run of `case.warmup_epochs` per variant, then `repeats` interleaved rounds of runs
    of `case.epochs`, each a sample in µs per iteration, each variant's checks after its run and the case's after
    each round."""

    def run(variant: Any, epochs: int = case.epochs) -> float:
        for reset in variant.resets:
            reset()
        h.before_run(threads)
        start = time.perf_counter()
        measured = variant.body(epochs)
        elapsed, iterations = measured or (time.perf_counter() - start, case.batches_per_epoch * epochs)
        problems.extend(f"[{case.key}] {problem}" for check in variant.checks if (problem := check(epochs)))
        return elapsed / iterations * 1e6

    def after_round() -> None:
        problems.extend(f"[{case.key}] {problem}" for check in case.round_checks if (problem := check()))

    warm_up = lambda variant: run(variant, case.warmup_epochs)  # noqa: E731
    return h.measure(case.variants, repeats, rng, run, warm_up, after_round, label=lambda variant: variant.name)


def case_rows(case: Case, samples: dict[str, list[float]], statistic: str) -> list[dict[str, Any]]:
    """Each engine next to the raw loop, and tracktrain next to Ignite, with the goal on tracktrain's overhead; in
    an add-on case each engine with the add-on next to the same engine alone, with the goal on tracktrain's cost."""
    label = f"{case.key} ({case.iterations} it/run)"
    if not case.addons:
        bases = dict.fromkeys(samples, RAW) | {TRACKTRAIN: (RAW, IGNITE)}
        goal = h.overhead_goal(samples, (TRACKTRAIN, RAW), (IGNITE, RAW), GOAL_RATIO, statistic)
        return h.compare(label, samples, bases, "µs/it", statistic, **goal)
    bases: dict[str, Any] = {TRACKTRAIN: RAW, IGNITE: RAW}
    goal: dict[str, dict[str, Any]] = {"overhead_ratio": {}, "goal": {}}
    for suffix in case.addons:
        ours, theirs = TRACKTRAIN + suffix, IGNITE + suffix
        bases |= {ours: (TRACKTRAIN, theirs), theirs: IGNITE}
        found = h.overhead_goal(samples, (ours, TRACKTRAIN), (theirs, IGNITE), ADDON_GOAL_RATIO, statistic)
        for column, values in found.items():
            goal[column] |= values
    return h.compare(label, samples, bases, "µs/it", statistic, **goal)


def main(argv: list[str] | None = None) -> int:
    args = h.parse(
        __doc__,
        argv,
        {
            "iters": (3000, 500, "iterations per timed run, tiny model, rounded to whole epochs of 100 batches"),
            "noop_iters": (50_000, 10_000, "the same for the no-op step, epochs of 100"),
            "lightning_iters": (1000, 200, "cap on Lightning's iterations per timed run"),
            "repeats": (9, 3, "timed runs per variant and case"),
        },
        options=lambda add: add(
            "--cases", default=",".join(CASES), help=f"comma-separated case keys (default all: {', '.join(CASES)})"
        ),
        positive=["iters", "noop_iters", "lightning_iters", "repeats"],
        cases=CASES,
    )
    rng = h.prepare(args)
    wanted = args.cases.split(",")
    lightning, lightning_status = None, "not in these cases"
    if "tiny-step" in wanted:
        lightning, lightning_status = load_peer("lightning.pytorch", skip=args.no_lightning)
    root_dir = h.temporary_root("tracktrain-bench-")  # Lightning's default_root_dir; stays empty

    batches = 100
    epochs = max(1, round(args.iters / batches))
    noop_epochs = max(1, round(args.noop_iters / batches))
    tiny = Workload((32, 32, 1), 64, batches, seed=args.seed)
    cases = training_cases(tiny, epochs, max(1, epochs // 5), lightning, args.lightning_iters, root_dir)
    if "tiny-metrics" in wanted:
        classifier = Workload((32, 32, 10), 64, batches, seed=args.seed, classify=True)
        cases.append(metrics_case(classifier, epochs, max(1, epochs // 5)))
    if "tiny-pbar" in wanted:
        cases.append(pbar_case(tiny, epochs, max(1, epochs // 5)))
    cases += noop_cases(list(range(batches)), noop_epochs, max(1, noop_epochs // 10))
    cases = [case for case in cases if case.key in wanted]

    h.freeze_garbage()
    env = h.start(
        "tracktrain Engine overhead per iteration",
        args,
        f"{args.repeats} interleaved repeats per case",
        ignite=IGNITE_STATUS,
        lightning=lightning_status,
    )
    problems: list[str] = []
    rows, notes = [], []
    for case in cases:
        started = time.perf_counter()
        samples = measure_case(case, args.repeats, args.threads, rng, problems)
        rows += case_rows(case, samples, args.stat)
        notes += [f"{case.key}: {note()}" for note in case.notes]
        print(f"- {case.key}: {case.detail} [{time.perf_counter() - started:.1f} s]", flush=True)
    h.report(rows, "goal")
    print(
        f"goal: on tracktrain's rows, its overhead over the raw loop ÷ Ignite's (≤ {GOAL_RATIO}), or in an add-on "
        f"case what the add-on costs it ÷ what it costs Ignite (≤ {ADDON_GOAL_RATIO:g}); the ratio is given where "
        "Ignite's exceeds the noise (the widest IQR of the four samples)."
    )
    for note in notes:
        print(f"- {note}")
    if ignite is None:
        print(f"\nignite: {IGNITE_STATUS}; the goals cannot be checked.")
    else:
        print(h.goal_line("Goals (tracktrain's overhead ≤ 0.5 × Ignite's; add-ons ≤ 1 ×)", h.goals(rows)))
    payload = {"environment": env, "lightning": lightning_status, "arguments": vars(args), "rows": rows}
    return h.finish(args, {**payload, "notes": notes}, problems)


if __name__ == "__main__":
    sys.exit(main())
