#!/usr/bin/env python
"""Per-iteration overhead of tracktrain's Engine next to a hand-written loop, PyTorch-Ignite and Lightning; and what
metrics and a progress bar cost on top of each engine ((the engine with them) − (the same engine without them)),
next to Ignite's. The cases are in engine_cases.py and engine_addons.py, and in benchmarks/README.md.

    .venv/bin/python benchmarks/bench_engine_overhead.py --quick      # smoke test, ~50 s
    .venv/bin/python benchmarks/bench_engine_overhead.py              # the real run, ~3 min on 2 cores

Timing never makes this script fail; it exits with status 1 when an engine did not run the expected number of
iterations, tracktrain's handlers did not fire as often as Ignite's, the two libraries' metrics computed different
values, or a progress bar meant to draw on the terminal wrote nothing.
"""

from __future__ import annotations

import cProfile
import random
import sys
import time
from typing import Any

import harness as h
import torch
from engine_addons import metrics_case, pbar_case
from engine_cases import (
    IGNITE,
    IGNITE_STATUS,
    LIGHTNING,
    RAW,
    TRACKTRAIN,
    Case,
    Variant,
    Workload,
    ignite,
    noop_cases,
    training_cases,
)
from workloads import load_peer

GOAL_RATIO = 0.5  # the project's goal: tracktrain's overhead <= GOAL_RATIO x Ignite's, measured in the same run
ADDON_GOAL_RATIO = 1.0  # for metrics and the progress bar: tracktrain's cost <= Ignite's


# -------------------------------------------------------------------------------------------------- timing
def run_once(variant: Variant, epochs: int, iterations: int, threads: int) -> float:
    """One timed run; returns microseconds per iteration."""
    if variant.reset is not None:
        variant.reset()
    h.before_run(threads)
    start = time.perf_counter()
    measured = variant.body(epochs)
    elapsed = time.perf_counter() - start
    if measured is not None:
        elapsed, iterations = measured
    return elapsed / iterations * 1e6


def check_run(case: Case, variant: Variant, epochs: int, problems: list[str]) -> None:
    if variant.check is not None:
        problem = variant.check(epochs)
        if problem:
            problems.append(f"[{case.key}] {problem}")


def check_handler_counts(case: Case, problems: list[str]) -> None:
    if TRACKTRAIN in case.handler_counts and IGNITE in case.handler_counts:
        ours, theirs = case.handler_counts[TRACKTRAIN], case.handler_counts[IGNITE]
        if ours != theirs:
            problems.append(f"[{case.key}] handler call counts differ: tracktrain {ours} vs ignite {theirs}")
    for cross_check in case.cross_checks:
        problem = cross_check()
        if problem:
            problems.append(f"[{case.key}] {problem}")


def measure_case(
    case: Case, repeats: int, threads: int, rng: random.Random, problems: list[str]
) -> dict[str, list[float]]:
    """On the harness, a warm-up of `case.warmup_epochs`; after every round, the handlers' counts of each engine's
    last run."""

    def run(variant: Variant, epochs: int = case.epochs) -> float:
        sample = run_once(variant, epochs, case.batches_per_epoch * epochs, threads)
        check_run(case, variant, epochs, problems)
        return sample

    def warm_up(variant: Variant) -> float:
        return run(variant, case.warmup_epochs)

    def after_round() -> None:
        check_handler_counts(case, problems)

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
    for addon in case.addons:
        ours, theirs = TRACKTRAIN + addon.suffix, IGNITE + addon.suffix
        bases |= {ours: (TRACKTRAIN, theirs), theirs: IGNITE}
        found = h.overhead_goal(
            samples, (ours, TRACKTRAIN), (theirs, IGNITE), ADDON_GOAL_RATIO, statistic, addon.in_goal
        )
        for column, values in found.items():
            goal[column] |= values
    return h.compare(label, samples, bases, "µs/it", statistic, **goal)


def profile_case(case: Case, threads: int, top: int) -> None:
    """cProfile one run of each engine variant of the case; prints the functions with the most own time.

    In the add-on cases (metrics, progress bar) only the engines with the add-on are profiled, and only the
    functions of that library (and of tqdm) are listed, by cumulative time: the shared training step would
    otherwise fill the list. Their cumulative time includes the torch calls they make.
    """
    for variant in case.variants:
        if variant.profile_target is None:
            continue
        if variant.reset is not None:
            variant.reset()
        h.before_run(threads)
        profiler = cProfile.Profile()
        profiler.enable()
        variant.body(case.epochs)
        profiler.disable()
        title = f"\n### cProfile: {case.key} / {variant.name} ({case.iterations} iterations), top {top}"
        if case.addons:
            library = TRACKTRAIN if variant.name.startswith(TRACKTRAIN) else IGNITE
            h.print_profile(
                profiler,
                f"{title} functions of {library} and tqdm by cumulative time\n",
                top,
                "cumulative",
                rf"[/\\]({library}|tqdm)[/\\]",
            )
        else:
            h.print_profile(profiler, f"{title} by own time\n", top)


def selected(key: str, wanted: str) -> bool:
    if wanted == "all":
        return True
    return any(key == item or key.startswith(item + "-") for item in wanted.split(","))


def main(argv: list[str] | None = None) -> int:
    args = h.parse(
        __doc__,
        argv,
        {
            "iters": (3000, 500, "iterations per timed run, tiny model, rounded to whole epochs of 100 batches"),
            "medium_iters": (20, 10, "the same for the medium model, epochs of 10 batches"),
            "noop_iters": (50_000, 10_000, "the same for the no-op step, epochs of 100"),
            "lightning_iters": (1000, 200, "cap on Lightning's iterations per timed run"),
            "repeats": (9, 3, "timed runs per variant and case"),
        },
        options=lambda add: add(
            "--cases",
            default="all",
            help="comma-separated case keys or prefixes: tiny, medium, noop, tiny-step, tiny-metrics, tiny-pbar, "
            "noop-handlers, ... (default all)",
        ),
        positive=["iters", "medium_iters", "noop_iters", "lightning_iters", "repeats"],
        profile_top=25,
    )
    rng = h.prepare(args)
    lightning, lightning_status = None, "left out (--no-lightning)"
    if not args.no_lightning and (selected("tiny-step", args.cases) or selected("medium-step", args.cases)):
        lightning, lightning_status = load_peer("lightning.pytorch")
    root_dir = h.temporary_root("tracktrain-bench-")  # Lightning's default_root_dir; stays empty

    tiny_batches, medium_batches = 100, 10
    cases: list[Case] = []
    tiny_epochs = max(1, round(args.iters / tiny_batches))
    tiny_warmup_epochs = max(1, tiny_epochs // 5)
    tiny = Workload((32, 32, 1), 64, tiny_batches, seed=args.seed)
    if any(selected(f"tiny-{kind}", args.cases) for kind in ("step", "supervised", "handlers")):
        cases += training_cases(
            "tiny",
            "tiny MLP",
            tiny,
            tiny_epochs,
            tiny_warmup_epochs,
            lightning,
            args.lightning_iters,
            root_dir,
        )
    if selected("tiny-metrics", args.cases):
        classifier = Workload((32, 32, 10), 64, tiny_batches, seed=args.seed, classify=True)
        cases.append(metrics_case(classifier, tiny_epochs, tiny_warmup_epochs))
    if selected("tiny-pbar", args.cases):
        cases.append(pbar_case(tiny, tiny_epochs, tiny_warmup_epochs))
    if any(selected(f"medium-{kind}", args.cases) for kind in ("step", "supervised", "handlers")):
        medium = Workload((512, 1024, 1024, 10), 128, medium_batches, seed=args.seed)
        medium_epochs = max(1, round(args.medium_iters / medium_batches))
        medium_lightning_iters = max(medium_batches, min(args.lightning_iters, medium_epochs * medium_batches))
        cases += training_cases(
            "medium",
            "medium MLP",
            medium,
            medium_epochs,
            1,
            lightning,
            medium_lightning_iters,
            root_dir,
        )
    if any(selected(key, args.cases) for key in ("noop", "noop-handlers")):
        noop_epochs = max(1, round(args.noop_iters / tiny_batches))
        cases += noop_cases(list(range(tiny_batches)), noop_epochs, max(1, noop_epochs // 10))
    cases = [case for case in cases if selected(case.key, args.cases)]
    for case in cases:
        if not case.key.endswith("-step"):
            case.variants = [variant for variant in case.variants if variant.name != LIGHTNING]
    if not cases:
        print(f"No case matches --cases {args.cases!r}.", file=sys.stderr)
        return 2

    h.freeze_garbage()
    env = h.environment(torch.get_num_threads(), ignite=IGNITE_STATUS)
    h.print_heading(
        "tracktrain Engine overhead per iteration",
        env,
        args,
        f"ignite {env['ignite']}, lightning {lightning_status}",
        f"{args.repeats} interleaved repeats per case",
    )
    problems: list[str] = []
    rows, notes = [], []
    for case in cases:
        started = time.perf_counter()
        samples = measure_case(case, args.repeats, args.threads, rng, problems)
        rows += case_rows(case, samples, args.stat)
        notes += [f"{case.key}: {note}" for note in case.notes + [note() for note in case.late_notes]]
        print(f"- {case.title} [{case.key}]: {case.detail} [{time.perf_counter() - started:.1f} s]", flush=True)
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
    if args.profile:
        for case in cases:
            profile_case(case, args.threads, args.profile_top)
    payload = {"environment": env, "lightning": lightning_status, "arguments": vars(args), "rows": rows}
    return h.finish(args, {**payload, "notes": notes}, problems)


if __name__ == "__main__":
    sys.exit(main())
