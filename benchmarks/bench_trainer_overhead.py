#!/usr/bin/env python
"""Per-iteration overhead of tracktrain's `Trainer.fit` next to a hand-written loop and Lightning's `Trainer`, with
everything off ("off": no bar, checkpoint or logger; the module still calls `self.log`) and with each library's
defaults ("defaults": its bar drawing to /dev/null, its checkpoint at each epoch's end, Lightning's logger); and
the start-up of a fit (the Trainer's construction to the first forward).

A sample is (long fit − short fit) / (iterations between them), from one short (1 epoch) and one long fit of the
variant: what happens once per fit cancels out. See benchmarks/README.md.

    .venv/bin/python benchmarks/bench_trainer_overhead.py --quick      # smoke test, ~15 s
    .venv/bin/python benchmarks/bench_trainer_overhead.py              # the real run, ~1.5 min on 2 cores

Timing never makes this script fail; it exits with status 1 when a fit ran the wrong number of iterations, ended
on other weights than the hand-written loop's, wrote files with everything off, saved no checkpoint with the
defaults, or a bar that should draw wrote nothing.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import harness as h
import torch
import torch.nn.functional as F
from torch import nn
from workloads import (
    LEARNING_RATE,
    Classifier,
    ClassifierData,
    FirstForward,
    bare_trainer,
    lightning_classifier_class,
    lightning_trainer,
    load_peer,
    weights,
    weights_match,
)

from tracktrain.callbacks import TrainerProgressBar
from tracktrain.trainer import Trainer

RAW, OFF, DEFAULTS = "raw", "off", "defaults"
GOAL_RATIO = {OFF: 1 / 3, DEFAULTS: 1.0}  # tracktrain's overhead over Lightning's, measured in the same run
CASES = {"tiny": ((32, 64, 10), 32, 100, 50), "medium": ((256, 512, 512, 10), 64, 50, 20)}  # sizes, batch, batches


class CountingSink(io.TextIOBase):
    """Throws its input away and counts it: the warm-up proves that a bar draws."""

    characters = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.characters += len(text)
        return len(text)


@dataclass
class Run:
    seconds: float  # from the Trainer's construction (the raw loop: its optimizer's) to the end of fit
    startup_s: float  # from there to the first forward
    iterations: int
    net: nn.Module
    logger: str = ""


@dataclass
class Variant:
    """`fit(workload, epochs, run_dir, sink)` trains a fresh copy of the net; a bar draws on `sink`."""

    name: str
    mode: str  # OFF, DEFAULTS, or "" for the raw loop
    fit: Callable[[ClassifierData, int, str, Any], Run]


def fit_raw(workload: ClassifierData, epochs: int, run_dir: str, sink: Any) -> Run:
    """The hand-written loop: zero_grad, forward, loss, backward, step. No logging."""
    net = workload.fresh_net()
    clock = FirstForward(net)
    start = time.perf_counter()
    optimizer = torch.optim.SGD(net.parameters(), lr=LEARNING_RATE)
    for _ in range(epochs):
        for x, y in workload.loader:
            optimizer.zero_grad()
            F.cross_entropy(net(x), y).backward()
            optimizer.step()
    return Run(time.perf_counter() - start, clock.time - start, epochs * len(workload.loader), net)


def tracktrain_fitter(mode: str) -> Callable[[ClassifierData, int, str, Any], Run]:
    def fit(workload: ClassifierData, epochs: int, run_dir: str, sink: Any) -> Run:
        net = workload.fresh_net()
        clock = FirstForward(net)
        start = time.perf_counter()
        if mode == OFF:
            trainer = bare_trainer(max_epochs=epochs, log_every_n_steps=50, default_root_dir=run_dir)
        else:  # the default bar draws only on a terminal; disable=False makes it draw as Lightning's does
            bar = TrainerProgressBar(file=sink, disable=False)
            trainer = Trainer(max_epochs=epochs, default_root_dir=run_dir, accelerator="cpu", callbacks=[bar])
        trainer.fit(Classifier(net), workload.loader)
        return Run(time.perf_counter() - start, clock.time - start, trainer.global_step, net)

    return fit


def lightning_fitter(lightning: Any, mode: str) -> Callable[[ClassifierData, int, str, Any], Run]:
    module_class = lightning_classifier_class(lightning)

    def fit(workload: ClassifierData, epochs: int, run_dir: str, sink: Any) -> Run:
        net = workload.fresh_net()
        clock = FirstForward(net)
        start = time.perf_counter()
        with contextlib.redirect_stdout(sink):  # Lightning's bar writes to sys.stdout, read when it is built
            settings = {"max_epochs": epochs, "default_root_dir": run_dir, "accelerator": "cpu", "devices": 1}
            trainer = lightning_trainer(lightning, **settings) if mode == OFF else lightning.Trainer(**settings)
            trainer.fit(module_class(net), train_dataloaders=workload.loader)
        logger = type(trainer.logger).__name__ if trainer.logger is not None else ""
        return Run(time.perf_counter() - start, clock.time - start, trainer.global_step, net, logger)

    return fit


def make_variants(lightning: Any) -> list[Variant]:
    variants = [Variant(RAW, "", fit_raw)]
    for mode in (OFF, DEFAULTS):
        variants.append(Variant(f"tracktrain-{mode}", mode, tracktrain_fitter(mode)))
        if lightning is not None:
            variants.append(Variant(f"lightning-{mode}", mode, lightning_fitter(lightning, mode)))
    return variants


def run_once(
    workload: ClassifierData, variant: Variant, epochs: int, reference: Any, args: Any, sink: Any, problems: list
) -> Run:
    """One fit in a fresh directory (removed afterwards: a checkpoint left there would change the next fit), then
    its checks: iterations, the raw loop's weights (`reference`, bit for bit with one thread) and its files."""
    run_dir = tempfile.mkdtemp(prefix="run-", dir=args.root)
    try:
        h.before_run(args.threads)
        run = variant.fit(workload, epochs, run_dir, sink)
        written = [os.path.relpath(os.path.join(d, n), run_dir) for d, _, names in os.walk(run_dir) for n in names]
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    where = f"{variant.name} ({epochs} epochs)"
    if run.iterations != epochs * workload.batches_per_epoch:
        problems.append(f"{where}: ran {run.iterations} iterations, expected {epochs * workload.batches_per_epoch}")
    if reference is not None and not weights_match(weights(run.net), reference):
        problems.append(f"{where}: the trained weights differ from the hand-written loop's")
    if variant.mode == OFF and written:
        problems.append(f"{where}: wrote files with checkpointing and logging off: {written[:5]}")
    if variant.mode == DEFAULTS and not any("checkpoints" in path.split(os.sep) for path in written):
        problems.append(f"{where}: saved no checkpoint with the defaults (files: {written[:5]})")
    return run


def measure_case(key: str, variants: list[Variant], args: Any, rng: Any, problems: list[str]) -> list[dict]:
    sizes, batch, batches, quick_batches = CASES[key]
    workload = ClassifierData(sizes, batch, quick_batches if args.quick else batches, args.seed)
    lengths = (1, getattr(args, f"{key}_epochs"))
    reference = {epochs: weights(fit_raw(workload, epochs, "", None).net) for epochs in lengths}
    devnull = open(os.devnull, "w", encoding="utf-8")
    loggers = set()

    def warm_up(variant: Variant) -> float:  # the first fit's start-up; a bar that should draw must write
        sink = CountingSink()
        run = run_once(workload, variant, 1, reference[1], args, sink, problems)
        if variant.mode == DEFAULTS and sink.characters == 0:
            problems.append(f"{key} / {variant.name}: the progress bar wrote nothing, so it did not draw")
        return run.startup_s * 1e3

    first = {variant.name: warm_up(variant) for variant in variants}

    def run(variant: Variant) -> tuple[float, list[float]]:
        """A short and a long fit in shuffled order: µs per iteration between them, and their start-ups (ms)."""
        order = list(lengths)
        rng.shuffle(order)
        runs = {
            epochs: run_once(workload, variant, epochs, reference[epochs], args, devnull, problems) for epochs in order
        }
        loggers.update(run.logger for run in runs.values() if run.logger)
        extra = runs[lengths[1]].seconds - runs[1].seconds
        return extra / ((lengths[1] - 1) * workload.batches_per_epoch) * 1e6, [r.startup_s * 1e3 for r in runs.values()]

    samples = h.measure(variants, args.repeats, rng, run, warmup=False, label=lambda variant: variant.name)
    per_iteration = {name: [us for us, _ in values] for name, values in samples.items()}
    print(
        f"- {key}: {workload.describe()}; fits of {lengths[0]} and {lengths[1]} epochs; Lightning's logger: {loggers or '—'}"
    )
    rows = []
    for mode in (OFF, DEFAULTS):
        ours, theirs = f"tracktrain-{mode}", f"lightning-{mode}"
        mine = {name: values for name, values in per_iteration.items() if name in (RAW, ours, theirs)}
        goal = h.overhead_goal(mine, (ours, RAW), (theirs, RAW), GOAL_RATIO[mode], args.stat)
        bases = {ours: (RAW, theirs), theirs: RAW}
        rows += h.compare(f"{key} {mode}", mine, bases, "µs/it", args.stat, **goal)
    startups = {name: [ms for _, pair in values for ms in pair] for name, values in samples.items()}
    rows += h.compare(f"{key} start-up", startups, RAW, "ms", "median", warmup_fit_ms=first)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = h.parse(
        __doc__,
        argv,
        {
            "repeats": (9, 3, "timed (short, long) pairs of fits per variant"),
            "tiny_epochs": (11, 3, "epochs of the tiny model's long fit, the short one being 1"),
            "medium_epochs": (5, 3, "the same for the medium model"),
        },
        options=lambda add: add("--cases", default="tiny,medium", help="comma-separated: tiny, medium"),
        positive=["repeats"],
        at_least_two=["tiny_epochs", "medium_epochs"],
        cases=list(CASES),
        root_dir="the fits write (checkpoints, Lightning's logs)",
        stat_of="the pairs of fits",
    )
    rng = h.prepare(args)
    lightning, lightning_status = load_peer("lightning", skip=args.no_lightning)
    variants = make_variants(lightning)
    args.root = h.temporary_root("tracktrain-bench-trainer-", args.root_dir)
    h.freeze_garbage()
    env = h.start(
        "Trainer.fit overhead per iteration",
        args,
        f"{args.repeats} interleaved pairs of fits",
        lightning=lightning_status,
    )
    problems: list[str] = []
    rows = [row for key in args.cases.split(",") for row in measure_case(key, variants, args, rng, problems)]
    h.report(rows, "goal", "warmup_fit_ms", decimals=1)
    print(
        "value: µs per iteration, start-up excluded; start-up: ms from the Trainer's construction to the first forward "
        "(median over the timed fits; warmup_fit_ms: the variant's untimed first fit, lazy imports included in the "
        "first case). goal: tracktrain's overhead over the raw loop ÷ Lightning's, where Lightning's exceeds "
        "the noise (the widest IQR), against its goal: ≤ 1/3 with everything off, ≤ 1 with the defaults."
    )
    verdicts = h.goals(rows)
    if verdicts:
        print(h.goal_line("Goals (tracktrain's overhead over Lightning's)", verdicts))
    else:
        print(f"\nlightning: {lightning_status}; the goals cannot be checked.")
    del args.root
    return h.finish(args, {"environment": env, "arguments": vars(args), "rows": rows}, problems)


if __name__ == "__main__":
    sys.exit(main())
