#!/usr/bin/env python
"""Per-iteration overhead of tracktrain's Engine, next to a hand-written loop, PyTorch-Ignite and Lightning.

Every case runs its variants in one process, interleaved (the order is shuffled in each repeat), after a
warm-up, with a fixed torch thread count. The figure reported for a variant is the median (or --stat), over
the repeats, of its time per iteration; its overhead is that figure minus the raw loop's.

The add-on cases (tiny-metrics, tiny-pbar) measure what metrics and a progress bar cost on top of each engine:
(the engine with them) − (the same engine without them), per library, in a second table.

    .venv/bin/python benchmarks/bench_engine_overhead.py --quick      # smoke test, ~50 s
    .venv/bin/python benchmarks/bench_engine_overhead.py              # the real run, ~3 min on 2 cores

Timing never makes this script fail. It exits with status 1 only when a sanity check fails: an engine did
not run the expected number of iterations, tracktrain's handlers did not fire as often as Ignite's, the two
libraries' metrics computed different values, or a progress bar meant to draw on the terminal wrote nothing.
See benchmarks/README.md for how to read the tables.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import random
import sys
import time
from collections.abc import Callable
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


def summarize(case: Case, samples: dict[str, list[float]], statistic: str = "median") -> dict[str, Any]:
    center = h.STATISTICS[statistic]
    medians = {name: center(values) for name, values in samples.items()}
    raw = medians[RAW]
    overheads = {name: medians[name] - raw for name in medians if name != RAW}
    iqrs = {name: h.iqr(values) for name, values in samples.items()}
    # What a difference of medians has to beat to mean something: the widest spread among the compared runs.
    noise = max(iqrs[name] for name in (RAW, TRACKTRAIN, IGNITE) if name in iqrs)
    ratio, goal = None, "n/a"
    if TRACKTRAIN in overheads and IGNITE in overheads:
        ours, theirs = overheads[TRACKTRAIN], overheads[IGNITE]
        if theirs > noise:
            ratio = ours / theirs
            goal = "yes" if ratio <= GOAL_RATIO else "NO"
        else:
            goal = "below noise"
    return {
        "key": case.key,
        "title": case.title,
        "detail": case.detail,
        "iterations_per_run": case.iterations,
        "statistic": statistic,
        "us_per_iter": medians,  # the chosen statistic of the samples: the median unless --stat says otherwise
        "overhead_us_per_iter": overheads,
        "iqr_us_per_iter": iqrs,
        "noise_us_per_iter": noise,
        "tracktrain_over_ignite_overhead": ratio,
        "goal_met": goal,
        "samples_us_per_iter": samples,
        "handler_counts_last_run": {name: list(counts) for name, counts in case.handler_counts.items()},
        "addons": summarize_addons(case, medians, iqrs),
        "notes": case.notes + [note() for note in case.late_notes],
    }


def summarize_addons(case: Case, medians: dict[str, float], iqrs: dict[str, float]) -> list[dict[str, Any]]:
    """Per add-on: each library's cost = (its engine with the add-on) − (the same engine without), the noise
    of those four samples, the ratio tracktrain / ignite and the verdict for the goal (≤ ADDON_GOAL_RATIO)."""
    rows = []
    for addon in case.addons:
        pairs = {
            library: (library, library + addon.suffix)
            for library in (TRACKTRAIN, IGNITE)
            if library in medians and library + addon.suffix in medians
        }
        costs = {library: medians[with_it] - medians[without] for library, (without, with_it) in pairs.items()}
        noise = max(iqrs[name] for pair in pairs.values() for name in pair)
        ratio, goal = None, "n/a"
        if TRACKTRAIN in costs and IGNITE in costs:
            ours, theirs = costs[TRACKTRAIN], costs[IGNITE]
            if theirs > noise:
                ratio = ours / theirs
            # the measured costs decide; "(within noise)" says that this run's spread is wider than the margin
            goal = h.verdict(ADDON_GOAL_RATIO * theirs - ours, noise)
        rows.append(
            {
                "suffix": addon.suffix,
                "label": addon.label,
                "in_goal": addon.in_goal,
                "us_per_iter": {name: medians[name] for pair in pairs.values() for name in pair},
                "cost_us_per_iter": costs,
                "noise_us_per_iter": noise,
                "tracktrain_over_ignite_cost": ratio,
                "goal_met": goal,
            }
        )
    return rows


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


# ------------------------------------------------------------------------------------------------ reporting
fmt = functools.partial(h.format_cell, decimals=2)  # hundredths: the no-op step's overheads are below 1 µs


def engine_table(results: list[dict[str, Any]], has_lightning: bool) -> str:
    header = ["case", "iters/run", "raw µs/it", "tracktrain µs/it", "ignite µs/it"]
    if has_lightning:
        header.append("lightning µs/it")
    header += ["tracktrain overhead", "ignite overhead"]
    if has_lightning:
        header.append("lightning overhead")
    header += ["noise (max IQR)", "tt/ignite overhead", f"goal ≤ {GOAL_RATIO}×"]
    lines = [header]
    for result in results:
        medians, overheads = result["us_per_iter"], result["overhead_us_per_iter"]
        missing = "not installed"
        row = [
            result["title"],
            str(result["iterations_per_run"]),
            fmt(medians[RAW]),
            fmt(medians.get(TRACKTRAIN)),
            fmt(medians[IGNITE]) if IGNITE in medians else missing,
        ]
        if has_lightning:
            row.append(fmt(medians.get(LIGHTNING)))
        tt_overhead = overheads.get(TRACKTRAIN)
        tt_cell = fmt(tt_overhead, True)
        if tt_overhead is not None and medians[RAW] >= 1.0:
            tt_cell += f" ({tt_overhead / medians[RAW]:+.1%})"
        row += [tt_cell, fmt(overheads[IGNITE], True) if IGNITE in overheads else missing]
        if has_lightning:
            row.append(fmt(overheads.get(LIGHTNING), True))
        ratio = result["tracktrain_over_ignite_overhead"]
        row += [fmt(result["noise_us_per_iter"]), "—" if ratio is None else f"{ratio:.2f}", result["goal_met"]]
        lines.append(row)
    return h.markdown_table(lines, "l" + "r" * (len(header) - 2) + "l")


def addon_table(results: list[dict[str, Any]]) -> str:
    def median(library: str, with_addon: bool = False) -> Callable[[dict[str, Any]], str]:
        def cell(row: dict[str, Any]) -> str:
            if library not in row["us_per_iter"]:
                return "not installed"
            return fmt(row["us_per_iter"].get(library + (row["suffix"] if with_addon else "")))

        return cell

    def cost(library: str) -> Callable[[dict[str, Any]], str]:
        def cell(row: dict[str, Any]) -> str:
            costs = row["cost_us_per_iter"]
            if library not in costs:
                return "not installed"
            return f"{fmt(costs[library], True)} ({costs[library] / row['us_per_iter'][library]:+.1%})"

        return cell

    ratio = "tracktrain_over_ignite_cost"
    columns = [
        ("case", "l", lambda row: f"{row['title']} [{row['key']}]"),
        ("add-on", "l", lambda row: row["label"]),
        ("iters/run", "r", lambda row: str(row["iterations_per_run"])),
        ("raw µs/it", "r", lambda row: fmt(row["raw_us_per_iter"])),
        ("tracktrain µs/it", "r", median(TRACKTRAIN)),
        ("tracktrain + add-on µs/it", "r", median(TRACKTRAIN, True)),
        ("ignite µs/it", "r", median(IGNITE)),
        ("ignite + add-on µs/it", "r", median(IGNITE, True)),
        ("tracktrain add-on cost", "r", cost(TRACKTRAIN)),
        ("ignite add-on cost", "r", cost(IGNITE)),
        ("noise (max IQR)", "r", lambda row: fmt(row["noise_us_per_iter"])),
        ("tt/ignite cost", "r", lambda row: "—" if row[ratio] is None else f"{row[ratio]:.2f}"),
        (
            f"goal ≤ {ADDON_GOAL_RATIO:g}×",
            "l",
            lambda row: row["goal_met"] if row["in_goal"] else f"({row['goal_met']}; not counted)",
        ),
    ]
    rows = [
        {
            "title": r["title"],
            "key": r["key"],
            "iterations_per_run": r["iterations_per_run"],
            "raw_us_per_iter": r["us_per_iter"][RAW],
            **row,
        }
        for r in results
        for row in r["addons"]
    ]
    return h.table(rows, columns)


# ---------------------------------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = h.make_parser(__doc__, profile_top=25)
    add = parser.add_argument
    add(
        "--iters",
        type=int,
        help="iterations per timed run, tiny model, rounded to whole epochs of 100 batches (default 3000; --quick 500)",
    )
    add("--medium-iters", type=int, help="the same for the medium model, epochs of 10 batches (default 20; --quick 10)")
    add("--noop-iters", type=int, help="the same for the no-op step, epochs of 100 (default 50000; --quick 10000)")
    add("--lightning-iters", type=int, help="cap on Lightning's iterations per timed run (default 1000; --quick 200)")
    add("--repeats", type=int, help="timed runs per variant and case (default 9; --quick 3)")
    add(
        "--cases",
        default="all",
        help="comma-separated case keys or prefixes: tiny, medium, noop, tiny-step, "
        "tiny-metrics, tiny-pbar, noop-handlers, ... (default all)",
    )
    defaults = {
        "iters": (3000, 500),
        "medium_iters": (20, 10),
        "noop_iters": (50_000, 10_000),
        "lightning_iters": (1000, 200),
        "repeats": (9, 3),
    }
    return h.finish_args(parser, argv, defaults, positive=list(defaults))


def selected(key: str, wanted: str) -> bool:
    if wanted == "all":
        return True
    return any(key == item or key.startswith(item + "-") for item in wanted.split(","))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
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
    results = []
    for case in cases:
        started = time.perf_counter()
        samples = measure_case(case, args.repeats, args.threads, rng, problems)
        result = summarize(case, samples, args.stat)
        results.append(result)
        cells = ", ".join(f"{name} {fmt(value)}" for name, value in result["us_per_iter"].items())
        print(
            f"- {case.title} [{case.key}] ({case.detail}; {case.iterations} it/run): {cells} µs/it "
            f"[{time.perf_counter() - started:.1f} s]",
            flush=True,
        )

    engine_results = [result for result in results if not result["addons"]]
    addon_results = [result for result in results if result["addons"]]
    if engine_results:
        report_engine_results(engine_results, args.stat)
    if addon_results:
        report_addon_results(addon_results, args.stat)

    if args.profile:
        for case in cases:
            profile_case(case, args.threads, args.profile_top)

    return h.finish(
        args, {"environment": env, "lightning": lightning_status, "arguments": vars(args), "results": results}, problems
    )


def report_engine_results(results: list[dict[str, Any]], stat: str) -> None:
    has_lightning = any(LIGHTNING in result["us_per_iter"] for result in results)
    print("\n" + engine_table(results, has_lightning) + "\n")
    print(
        f"µs/it: {stat} over the repeats of (time of a run / its iterations). overhead: variant − raw "
        "(for tracktrain also as a share of the raw step). noise: the largest interquartile range among "
        "the raw, tracktrain and ignite samples. tt/ignite overhead: tracktrain overhead / ignite overhead, given "
        f"only where ignite's overhead exceeds the noise; goal: ≤ {GOAL_RATIO}; 'below noise': the step is too "
        "long next to the overheads for this run to tell them apart."
    )
    for result in results:
        for note in result["notes"]:
            print(f"- {result['title']}: {note}")
    if ignite is None:
        print(f"\nignite: {IGNITE_STATUS}; its columns are empty and the goal cannot be checked.")
    else:
        verdicts = [(result["title"], result["goal_met"]) for result in results if result["goal_met"] != "n/a"]
        print(
            h.goal_line(
                f"Goal (tracktrain overhead ≤ {GOAL_RATIO} × ignite's)",
                verdicts,
                unit="cases",
                unclear="below noise",
                unclear_label="overheads below noise in",
            )
        )


def report_addon_results(results: list[dict[str, Any]], stat: str) -> None:
    print("\n## Metrics and progress bar: cost per iteration over the same engine without them\n")
    print(addon_table(results) + "\n")
    print(
        f"µs/it: {stat} over the repeats, as above. add-on cost: (engine with the add-on) − (the same engine without "
        "it), in µs per iteration and as a share of the engine without it. noise: the largest interquartile range "
        "of those four samples. tt/ignite cost: given only where ignite's cost exceeds the noise. goal: "
        f"tracktrain's cost ≤ {ADDON_GOAL_RATIO:g} × ignite's, as measured; '(within noise)' where the margin, "
        "either way, is smaller than the noise, so another run may say otherwise. Rows marked 'not counted' are "
        "reported but not like for like, so they do not count for the goal."
    )
    for result in results:
        for note in result["notes"]:
            print(f"- {result['title']}: {note}")
    if ignite is None:
        print(f"\nignite: {IGNITE_STATUS}; the goal cannot be checked.")
        return
    rows = [
        (f"{result['key']} {row['suffix']}", row["goal_met"])
        for result in results
        for row in result["addons"]
        if row["in_goal"]
    ]
    print(h.goal_line(f"Goal (tracktrain's metrics / progress bar cost ≤ {ADDON_GOAL_RATIO:g} × ignite's)", rows))


if __name__ == "__main__":
    sys.exit(main())
