#!/usr/bin/env python
"""Per-iteration overhead of tracktrain's `Trainer.fit`, next to a hand-written loop and Lightning's `Trainer`.

Two settings of each Trainer are measured on the same model and data, in the same process:

- "off": no progress bar, no checkpoints, no logger (Lightning: no model summary either); the module still
  logs its loss with `self.log` every step.
- "defaults": each library as shipped, with its progress bar drawing (to /dev/null) and its checkpoint at the end
  of every epoch (Lightning also writes its default logger's files).

A Trainer's time per iteration is measured without its start-up: every repeat runs a short fit (E1 epochs) and
a long fit (E2 epochs) of each variant, and (time of the long fit − time of the short fit) / ((E2 − E1) ×
batches per epoch) is one sample. Everything that happens once per fit (construction, set-up, tear-down)
cancels out; everything that happens per iteration or per epoch (a checkpoint at each epoch's end) is counted.
The start-up (Trainer construction to the first forward) is reported separately.

    .venv/bin/python benchmarks/bench_trainer_overhead.py --quick      # smoke test, ~15 s
    .venv/bin/python benchmarks/bench_trainer_overhead.py              # the real run, ~1.5 min on 2 cores

Timing never makes this script fail. It exits with status 1 only when a sanity check fails: a fit ran the wrong
number of iterations, ended with weights different from the hand-written loop's, wrote files with everything
off, saved no checkpoint with the defaults, or a progress bar that should draw wrote nothing.
See benchmarks/README.md for how to read the tables.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import io
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import harness as h
import torch
import torch.nn.functional as F
from torch import nn
from workloads import (
    LEARNING_RATE,
    Classifier,
    ClassifierData,
    bare_trainer,
    lightning_classifier_class,
    load_peer,
    weights,
    weights_match,
)

from tracktrain.callbacks import TrainerProgressBar
from tracktrain.trainer import Trainer

RAW = "raw"
TRACKTRAIN, LIGHTNING = "tracktrain", "lightning"
OFF, DEFAULTS = "off", "defaults"
# The project's goals, as (tracktrain overhead) / (Lightning overhead) measured in the same run.
GOAL_RATIO = {OFF: 1 / 3, DEFAULTS: 1.0}


# ------------------------------------------------------------------------------------------------------ setup
Workload = ClassifierData


class FirstForward:
    """Reads the clock when the network's first forward starts, then removes itself, so it costs nothing per
    iteration (a module with a hook takes torch's slower call path)."""

    def __init__(self, net: nn.Module) -> None:
        self.time: float | None = None
        self._handle = net.register_forward_pre_hook(self._hook)

    def _hook(self, module: nn.Module, inputs: Any) -> None:
        self.time = time.perf_counter()
        self._handle.remove()


class CountingSink(io.TextIOBase):
    """A text stream that throws its input away and counts it: lets the warm-up prove that a bar draws."""

    def __init__(self) -> None:
        self.characters = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.characters += len(text)
        return len(text)


# ------------------------------------------------------------------------------------------------- variants
@dataclass
class Run:
    """One fit. `seconds` and `startup_s` are measured from the start of the Trainer's construction (the raw loop:
    of its optimizer) to the end of fit and to the first forward."""

    seconds: float
    startup_s: float
    iterations: int
    net: nn.Module
    logger: str = ""


@dataclass
class Variant:
    """`fit(workload, epochs, run_dir, sink)` trains a fresh copy of the network for `epochs` epochs; a progress
    bar, if any, draws on `sink` (a Lightning bar through sys.stdout)."""

    name: str
    library: str
    mode: str  # OFF or DEFAULTS ("" for the raw loop)
    fit: Callable[[Workload, int, str, Any], Run]
    draws_bar: bool = False
    saves_checkpoints: bool = False
    writes_nothing: bool = False


def fit_raw(workload: Workload, epochs: int, run_dir: str, sink: Any) -> Run:
    """The hand-written loop: zero_grad, forward, loss, backward, step. No logging."""
    net = workload.fresh_net()
    clock = FirstForward(net)
    start = time.perf_counter()
    optimizer = torch.optim.SGD(net.parameters(), lr=LEARNING_RATE)
    net.train()
    for _ in range(epochs):
        for x, y in workload.loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            optimizer.step()
    end = time.perf_counter()
    return Run(end - start, clock.time - start, epochs * len(workload.loader), net)


def tracktrain_fitter(mode: str) -> Callable[[Workload, int, str, Any], Run]:
    def fit(workload: Workload, epochs: int, run_dir: str, sink: Any) -> Run:
        net = workload.fresh_net()
        module = Classifier(net)
        clock = FirstForward(net)
        start = time.perf_counter()
        # accelerator="cpu" as for Lightning: "auto" would pick CUDA where there is one
        if mode == OFF:
            trainer = bare_trainer(
                max_epochs=epochs,
                log_every_n_steps=50,
                default_root_dir=run_dir,
            )
        else:
            # the default bar only draws on a terminal; disable=False makes it draw as Lightning's does
            bar = TrainerProgressBar(file=sink, disable=False)
            trainer = Trainer(max_epochs=epochs, default_root_dir=run_dir, accelerator="cpu", callbacks=[bar])
        trainer.fit(module, workload.loader)
        end = time.perf_counter()
        return Run(end - start, clock.time - start, trainer.global_step, net)

    return fit


def lightning_fitter(lightning: Any, mode: str) -> Callable[[Workload, int, str, Any], Run]:
    module_class = lightning_classifier_class(lightning)

    def fit(workload: Workload, epochs: int, run_dir: str, sink: Any) -> Run:
        net = workload.fresh_net()
        module = module_class(net)
        clock = FirstForward(net)
        start = time.perf_counter()
        with contextlib.redirect_stdout(sink):  # Lightning's bar writes to sys.stdout, read when it is built
            if mode == OFF:
                trainer = lightning.Trainer(
                    max_epochs=epochs,
                    enable_progress_bar=False,
                    enable_checkpointing=False,
                    logger=False,
                    enable_model_summary=False,
                    accelerator="cpu",
                    devices=1,
                    num_sanity_val_steps=0,
                    default_root_dir=run_dir,
                )
            else:
                trainer = lightning.Trainer(max_epochs=epochs, default_root_dir=run_dir, accelerator="cpu", devices=1)
            trainer.fit(module, train_dataloaders=workload.loader)
        end = time.perf_counter()
        logger = type(trainer.logger).__name__ if trainer.logger is not None else ""
        return Run(end - start, clock.time - start, trainer.global_step, net, logger)

    return fit


def make_variants(lightning: Any) -> list[Variant]:
    variants = [Variant(RAW, RAW, "", fit_raw)]
    libraries = [(TRACKTRAIN, tracktrain_fitter)]
    if lightning is not None:
        libraries.append((LIGHTNING, lambda mode: lightning_fitter(lightning, mode)))
    for mode in (OFF, DEFAULTS):
        for library, fitter in libraries:
            variants.append(
                Variant(
                    f"{library}-{mode}",
                    library,
                    mode,
                    fitter(mode),
                    draws_bar=mode == DEFAULTS,
                    saves_checkpoints=mode == DEFAULTS,
                    writes_nothing=mode == OFF,
                )
            )
    return variants


# ----------------------------------------------------------------------------------------------------- cases
@dataclass
class Case:
    key: str
    title: str
    workload: Workload
    short_epochs: int
    long_epochs: int
    reference: dict[int, list[torch.Tensor]] = field(default_factory=dict)  # epochs -> the raw loop's weights
    loggers: dict[str, str] = field(default_factory=dict)  # variant -> its logger's class

    @property
    def measured_iterations(self) -> int:
        """The iterations a sample is made of: those of the long fit beyond the short one."""
        return (self.long_epochs - self.short_epochs) * self.workload.batches_per_epoch


def check_run(case: Case, variant: Variant, epochs: int, run: Run, run_dir: str, problems: list[str]) -> None:
    """After every fit, outside the timing: the right number of iterations, the raw loop's weights (the same
    arithmetic in the same order: bit for bit with one thread; the tolerance is for other thread counts), and the
    files each setting must (not) write."""
    where = f"[{case.key}] {variant.name} ({epochs} epochs)"
    expected = epochs * case.workload.batches_per_epoch
    if run.iterations != expected:
        problems.append(f"{where}: ran {run.iterations} iterations, expected {expected}")
    reference = case.reference.get(epochs)
    if reference is not None:
        if not weights_match(weights(run.net), reference):
            problems.append(f"{where}: the trained weights differ from the hand-written loop's")
    written = [
        os.path.relpath(os.path.join(root, name), run_dir) for root, _, names in os.walk(run_dir) for name in names
    ]
    if variant.writes_nothing and written:
        problems.append(f"{where}: wrote files with checkpointing and logging off: {written[:5]}")
    if variant.saves_checkpoints and not any("checkpoints" in path.split(os.sep) for path in written):
        problems.append(f"{where}: saved no checkpoint with the defaults (files: {written[:5]})")
    if run.logger:
        case.loggers[variant.name] = run.logger


def run_once(
    case: Case, variant: Variant, epochs: int, root_dir: str, threads: int, sink: Any, problems: list[str]
) -> Run:
    """One fit in a fresh, empty directory under `root_dir` (removed afterwards, outside the timing): a
    checkpoint directory left by an earlier fit would change what the next one does."""
    run_dir = tempfile.mkdtemp(prefix="run-", dir=root_dir)
    try:
        h.before_run(threads)
        run = variant.fit(case.workload, epochs, run_dir, sink)
        check_run(case, variant, epochs, run, run_dir, problems)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    return run


def warm_up(case: Case, variants: list[Variant], root_dir: str, threads: int, problems: list[str]) -> dict[str, float]:
    """One untimed short fit of each variant (first-call paths, lazy imports, allocator), drawing on a counting
    sink: a bar that should draw must write something. Returns each warm-up fit's start-up (s)."""
    startups = {}
    for variant in variants:
        sink = CountingSink()
        startups[variant.name] = run_once(case, variant, case.short_epochs, root_dir, threads, sink, problems).startup_s
        if variant.draws_bar and sink.characters == 0:
            problems.append(f"[{case.key}] {variant.name}: the progress bar wrote nothing, so it did not draw")
    return startups


def measure_case(
    case: Case,
    variants: list[Variant],
    repeats: int,
    root_dir: str,
    threads: int,
    rng: random.Random,
    sink: Any,
    problems: list[str],
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, float]]:
    """Per variant: the per-iteration samples (µs), the start-ups (s) of all its timed fits, and the start-up (s)
    of its warm-up fit."""
    for epochs in (case.short_epochs, case.long_epochs):
        case.reference[epochs] = weights(fit_raw(case.workload, epochs, "", None).net)
    first_startups = warm_up(case, variants, root_dir, threads, problems)

    def run(variant: Variant) -> tuple[float, list[float]]:
        """A short and a long fit, in shuffled order: µs per iteration between them, and their start-ups."""
        lengths = [case.short_epochs, case.long_epochs]
        rng.shuffle(lengths)
        runs = {epochs: run_once(case, variant, epochs, root_dir, threads, sink, problems) for epochs in lengths}
        extra = runs[case.long_epochs].seconds - runs[case.short_epochs].seconds
        return extra / case.measured_iterations * 1e6, [run.startup_s for run in runs.values()]

    samples = h.measure(variants, repeats, rng, run, warmup=False, label=lambda variant: variant.name)
    per_iteration = {name: [us for us, _ in values] for name, values in samples.items()}
    startups = {name: [s for _, pair in values for s in pair] for name, values in samples.items()}
    return per_iteration, startups, first_startups


# ------------------------------------------------------------------------------------------------ summaries
def summarize(
    case: Case,
    per_iteration: dict[str, list[float]],
    startups: dict[str, list[float]],
    first_startups: dict[str, float],
    statistic: str,
) -> dict[str, Any]:
    center = h.STATISTICS[statistic]
    us_per_iter = {name: center(values) for name, values in per_iteration.items()}
    spread = {name: h.iqr(values) for name, values in per_iteration.items()}
    startup_ms = {name: statistics.median(values) * 1e3 for name, values in startups.items()}
    first_ms = {name: seconds * 1e3 for name, seconds in first_startups.items()}
    raw = us_per_iter[RAW]
    rows = []
    for mode in (OFF, DEFAULTS):
        ours, theirs = f"{TRACKTRAIN}-{mode}", f"{LIGHTNING}-{mode}"
        overhead = {
            library: us_per_iter[name] - raw
            for library, name in ((TRACKTRAIN, ours), (LIGHTNING, theirs))
            if name in us_per_iter
        }
        # what a difference of medians has to beat to mean something: the widest spread among the compared runs
        noise = max(spread[name] for name in (RAW, ours, theirs) if name in spread)
        ratio, goal = None, "n/a"
        if LIGHTNING in overhead:
            if overhead[LIGHTNING] > noise:
                ratio = overhead[TRACKTRAIN] / overhead[LIGHTNING]
            goal = h.verdict(GOAL_RATIO[mode] * overhead[LIGHTNING] - overhead[TRACKTRAIN], noise)
        rows.append(
            {
                "mode": mode,
                "us_per_iter": {RAW: raw, TRACKTRAIN: us_per_iter[ours], LIGHTNING: us_per_iter.get(theirs)},
                "overhead_us_per_iter": {TRACKTRAIN: overhead[TRACKTRAIN], LIGHTNING: overhead.get(LIGHTNING)},
                "noise_us_per_iter": noise,
                "tracktrain_over_lightning_overhead": ratio,
                "goal_ratio": GOAL_RATIO[mode],
                "goal_met": goal,
                "startup_ms": {RAW: startup_ms[RAW], TRACKTRAIN: startup_ms[ours], LIGHTNING: startup_ms.get(theirs)},
                "warmup_startup_ms": {RAW: first_ms[RAW], TRACKTRAIN: first_ms[ours], LIGHTNING: first_ms.get(theirs)},
            }
        )
    return {
        "key": case.key,
        "title": case.title,
        "detail": case.workload.describe(),
        "batches_per_epoch": case.workload.batches_per_epoch,
        "short_epochs": case.short_epochs,
        "long_epochs": case.long_epochs,
        "measured_iterations": case.measured_iterations,
        "statistic": statistic,
        "rows": rows,
        "us_per_iter": us_per_iter,
        "iqr_us_per_iter": spread,
        "startup_ms": startup_ms,
        "warmup_startup_ms": first_ms,
        "loggers": dict(case.loggers),
        "samples_us_per_iter": per_iteration,
        "samples_startup_s": startups,
    }


# ------------------------------------------------------------------------------------------------- reporting
fmt = functools.partial(h.format_cell, decimals=1)  # a fit's µs per iteration: its noise is whole µs
VARIANT_LIBRARIES = (RAW, TRACKTRAIN, LIGHTNING)


def overhead_table(results: list[dict[str, Any]]) -> str:
    def overhead(row: dict[str, Any]) -> str:
        ours = row["overhead_us_per_iter"][TRACKTRAIN]
        return f"{fmt(ours, True)} ({ours / row['us_per_iter'][RAW]:+.1%})"

    ratio = "tracktrain_over_lightning_overhead"
    columns = [
        ("case", "l", lambda row: row["title"]),
        ("settings", "l", lambda row: row["mode"]),
        ("iters/sample", "r", lambda row: str(row["measured_iterations"])),
        *[(f"{name} µs/it", "r", lambda row, name=name: fmt(row["us_per_iter"][name])) for name in VARIANT_LIBRARIES],
        ("tracktrain overhead", "r", overhead),
        ("lightning overhead", "r", lambda row: fmt(row["overhead_us_per_iter"][LIGHTNING], True)),
        ("noise (max IQR)", "r", lambda row: fmt(row["noise_us_per_iter"])),
        ("tt/lightning overhead", "r", lambda row: "—" if row[ratio] is None else f"{row[ratio]:.3f}"),
        ("goal", "l", lambda row: f"≤ {row['goal_ratio']:.2g}×: {row['goal_met']}"),
    ]
    return h.table(mode_rows(results), columns)


def mode_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per case and settings, with the case's title and iterations."""
    return [{**result, **row} for result in results for row in result["rows"]]


def startup_table(results: list[dict[str, Any]]) -> str:
    columns = [
        ("case", "l", lambda row: row["title"]),
        ("settings", "l", lambda row: row["mode"]),
        *[(f"{name} ms", "r", lambda row, name=name: fmt(row["startup_ms"][name])) for name in VARIANT_LIBRARIES],
        *[
            (f"{name}: warm-up fit ms", "r", lambda row, name=name: fmt(row["warmup_startup_ms"][name]))
            for name in (TRACKTRAIN, LIGHTNING)
        ],
    ]
    return h.table(mode_rows(results), columns)


def report(results: list[dict[str, Any]], stat: str, lightning_status: str, has_lightning: bool) -> None:
    print("\n## Time per iteration, start-up excluded\n")
    print(overhead_table(results) + "\n")
    print(
        f"µs/it: {stat} over the repeats of (long fit − short fit) / (iterations between them); iters/sample is "
        "that number of iterations. overhead: variant − raw, in µs per iteration (for tracktrain also as a share "
        "of the raw step). noise: the largest interquartile range of the raw, tracktrain and lightning samples. "
        "tt/lightning overhead: given only where Lightning's overhead exceeds the noise. goal: the measured "
        "overheads decide; '(within noise)' where the margin, either way, is smaller than the noise."
    )
    loggers = {name: logger for result in results for name, logger in result["loggers"].items()}
    if loggers:
        print(
            f"- Lightning's default logger here: {', '.join(sorted(set(loggers.values())))}; tracktrain's "
            "Trainer has no logger by default."
        )
    print("\n## Start-up: from the Trainer's construction to the first forward\n")
    print(startup_table(results) + "\n")
    print(
        "median over all timed fits (not in the per-iteration numbers); each includes the DataLoader's iterator "
        "and first batch (the raw loop: only those and its optimizer). warm-up fit: that variant's untimed first "
        f"fit of the case; in the first case ({results[0]['title']}) it is the variant's first fit in the process, "
        "lazy imports included."
    )
    if not has_lightning:
        print(f"\nlightning: {lightning_status}; its columns are empty and the goals cannot be checked.")
        return
    verdicts = [(f"{result['key']} {row['mode']}", row["goal_met"]) for result in results for row in result["rows"]]
    goal = (
        f"Goals (tracktrain overhead ≤ {GOAL_RATIO[OFF]:.2g} × Lightning's with everything off, ≤ "
        f"{GOAL_RATIO[DEFAULTS]:g} × with the defaults)"
    )
    print(h.goal_line(goal, verdicts))


def profile_case(case: Case, variants: list[Variant], root_dir: str, threads: int, top: int, sink: Any) -> None:
    """cProfile one long fit of each tracktrain variant: the functions with the most own time, then tracktrain's
    own functions by cumulative time (which includes the torch calls they make)."""
    for variant in variants:
        if variant.library != TRACKTRAIN:
            continue
        run_dir = tempfile.mkdtemp(prefix="profile-", dir=root_dir)
        h.before_run(threads)
        profiler = cProfile.Profile()
        profiler.enable()
        variant.fit(case.workload, case.long_epochs, run_dir, sink)
        profiler.disable()
        shutil.rmtree(run_dir, ignore_errors=True)
        iterations = case.long_epochs * case.workload.batches_per_epoch
        h.print_profile(
            profiler,
            f"\n### cProfile: {case.key} / {variant.name} ({iterations} iterations, start-up "
            f"included), top {top} by own time\n",
            top,
        )
        h.print_profile(
            profiler, "\ntracktrain's functions by cumulative time:", top, "cumulative", r"[/\\]tracktrain[/\\]"
        )


# ------------------------------------------------------------------------------------------------------ main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = h.make_parser(__doc__, profile_top=25, root_dir="the fits write (checkpoints, Lightning's logs)")
    add = parser.add_argument
    add("--repeats", type=int, help="timed (short, long) pairs per variant (default 9; --quick 3)")
    add(
        "--tiny-epochs",
        type=int,
        help="epochs of the tiny model's long fit, the short one being 1 (default 11; --quick 3)",
    )
    add("--medium-epochs", type=int, help="the same for the medium model (default 5; --quick 3)")
    add("--cases", default="tiny,medium", help="comma-separated: tiny, medium (default both)")
    defaults = {"repeats": (9, 3), "tiny_epochs": (11, 3), "medium_epochs": (5, 3)}
    return h.finish_args(
        parser,
        argv,
        defaults,
        positive=["repeats"],
        at_least_two=["tiny_epochs", "medium_epochs"],
        cases=["tiny", "medium"],
    )


def make_cases(args: argparse.Namespace) -> list[Case]:
    wanted = args.cases.split(",")
    cases = []
    if "tiny" in wanted:
        workload = Workload((32, 64, 10), 32, 50 if args.quick else 100, args.seed)
        cases.append(Case("tiny", "tiny MLP", workload, 1, args.tiny_epochs))
    if "medium" in wanted:
        workload = Workload((256, 512, 512, 10), 64, 20 if args.quick else 50, args.seed)
        cases.append(Case("medium", "medium MLP", workload, 1, args.medium_epochs))
    return cases


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rng = h.prepare(args)
    lightning, lightning_status = load_peer("lightning", skip=args.no_lightning)
    variants = make_variants(lightning)
    cases = make_cases(args)
    devnull = open(os.devnull, "w", encoding="utf-8")  # where the bars draw in timed fits
    root_dir = h.temporary_root("tracktrain-bench-trainer-", args.root_dir)
    h.freeze_garbage()

    env = h.environment(args.threads, lightning=lightning_status)
    h.print_heading(
        "tracktrain Trainer.fit overhead per iteration",
        env,
        args,
        f"lightning {lightning_status}",
        f"{args.repeats} interleaved repeats",
    )
    problems: list[str] = []
    results = []
    for case in cases:
        started = time.perf_counter()
        samples = measure_case(case, variants, args.repeats, root_dir, args.threads, rng, devnull, problems)
        result = summarize(case, *samples, args.stat)
        results.append(result)
        cells = ", ".join(f"{name} {fmt(value)}" for name, value in result["us_per_iter"].items())
        print(
            f"- {case.title} ({result['detail']}; fits of {case.short_epochs} and {case.long_epochs} epochs): "
            f"{cells} µs/it [{time.perf_counter() - started:.1f} s]",
            flush=True,
        )

    report(results, args.stat, lightning_status, lightning is not None)
    if args.profile:
        for case in cases:
            profile_case(case, variants, root_dir, args.threads, args.profile_top, devnull)

    return h.finish(args, {"environment": env, "arguments": vars(args), "results": results}, problems)


if __name__ == "__main__":
    sys.exit(main())
