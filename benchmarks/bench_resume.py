#!/usr/bin/env python
"""Resume time-to-first-step in the middle of a long epoch: tracktrain's `Trainer` (a `ResumableEngine`), Ignite's
`DeterministicEngine` and Lightning's `Trainer` (with a plain DataLoader, and with torchdata's `StatefulDataLoader`),
resumed from a checkpoint written at 10 %, 50 % and 90 % of the epoch, side by side in one process.

The workload (a long epoch whose samples cost CPU to make), the reference run and what is timed (from the call that
resumes to the first training step, also in batch loads) and checked (exact) are in benchmarks/README.md.

    .venv/bin/python benchmarks/bench_resume.py --quick   # smoke test, 100 batches, 1 repeat
    .venv/bin/python benchmarks/bench_resume.py           # the real run, 10 000 batches, ~45 s on 2 cores

Timing never makes this script fail. It exits with status 1 only when a sanity check of tracktrain fails: a
checkpoint is missing, its resumed run does not start at the checkpoint's step with the reference run's batch, or it
loaded samples of the skipped batches. The peers' results are reported, whatever they are.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import random
import re
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import harness as h
from resume_frameworks import (
    EXACT,
    IGNITE,
    LIGHTNING,
    LIGHTNING_SDL,
    TRACKTRAIN,
    FirstStep,
    Framework,
    Probe,
    Workload,
    ignite_runner,
    lightning_checkpoint,
    lightning_runner,
    run_tracktrain,
    step_of,
    tracktrain_checkpoint,
    verdict,
)
from workloads import load_peer

LABELS = {
    TRACKTRAIN: "tracktrain",
    IGNITE: "Ignite DeterministicEngine",
    LIGHTNING: "Lightning",
    LIGHTNING_SDL: "Lightning + StatefulDataLoader",
}
POINTS = (0, 10, 50, 90)  # % of the epoch at the checkpoint; 0: a fit without one (the baseline)
UNIT_BATCHES = 20  # batch loads timed per repeat for the unit
RESUME_WORDS = re.compile(r"resum(ing|able)", re.IGNORECASE)  # the warnings about resuming that the report quotes


class Bench:
    def __init__(self, workload: Workload, frameworks: list[Framework], root_dir: str) -> None:
        self.workload = workload
        self.frameworks = frameworks
        self.root_dir = root_dir
        self.every = workload.batches // 10
        self.samples: dict[tuple[str, int], list[FirstStep]] = {}
        self.unit_s: list[float] = []
        self.problems: list[str] = []
        self._runs = 0

    def _new_dir(self, name: str) -> str:
        self._runs += 1
        return os.path.join(self.root_dir, f"{name}-{self._runs}")

    def train_references(self, progress: Callable[[str], None]) -> None:
        """Each framework trains from scratch to one step past 90 % of the epoch, saving every 10 %."""
        last = step_of(POINTS[-1], self.workload.batches)
        for framework in self.frameworks:
            framework.ckpt_dir = self._new_dir(f"{framework.key}-checkpoints")
            framework.run_dir = self._new_dir(f"{framework.key}-run")
            probe = Probe(self.workload.dataset, stop_after=last + 1)
            started = time.perf_counter()
            framework.run(self.workload, probe, framework.ckpt_dir, framework.run_dir, self.every, None)
            framework.reference_s = time.perf_counter() - started
            framework.reference = probe.batches
            if len(probe.batches) != last + 1:
                self.problems.append(
                    f"{framework.key}: the reference run trained {len(probe.batches)} steps, expected {last + 1}"
                )
            for point in POINTS[1:]:
                path = framework.checkpoint(framework.ckpt_dir, step_of(point, self.workload.batches))
                if not os.path.exists(path):
                    self.problems.append(f"{framework.key}: the reference run wrote no checkpoint {path}")
            progress(f"{framework.key} reference run ({last + 1:,} steps) {framework.reference_s:.1f} s")

    def resume_once(self, framework: Framework, point: int, profiler: cProfile.Profile | None = None) -> FirstStep:
        step = step_of(point, self.workload.batches)
        ckpt_path = framework.checkpoint(framework.ckpt_dir, step) if point else None
        probe = Probe(self.workload.dataset, profiler=profiler)
        with warnings.catch_warnings(record=True) as raised:
            warnings.simplefilter("always")  # recorded, not shown: Lightning's are silenced otherwise
            # the same directories as the run that saved, as when the same command runs again: a fit from scratch
            # there too (it stops after one step, before its first save)
            framework.run(self.workload, probe, framework.ckpt_dir, framework.run_dir, self.every, ckpt_path)
        if probe.first is None:
            raise RuntimeError(f"{framework.key} at {point} %: the resumed run trained no step")
        probe.first.warnings = list(dict.fromkeys(str(w.message).split("\n")[0] for w in raised))
        return probe.first

    def profile(self, framework: Framework, point: int, top: int) -> None:
        """cProfile of one resume, from the call that resumes to the first step."""
        profiler = cProfile.Profile()
        first = self.resume_once(framework, point, profiler)
        h.print_profile(
            profiler,
            f"\n### cProfile: {LABELS[framework.key]} resumed at {point} % ({first.seconds * 1e3:.1f} ms profiled)\n",
            top,
            "cumulative",
        )

    def warm_up(self) -> None:
        """One untimed resume per framework: lazy imports and first calls of the loading paths."""
        for framework in self.frameworks:
            self.resume_once(framework, POINTS[1])
        self.workload.time_batch_loads(UNIT_BATCHES)

    def measure(self, repeats: int, rng: random.Random, progress: Callable[[str], None]) -> None:
        keys: list[tuple[str, int] | None] = [None]  # None: time the batch loads (the unit)
        keys += [(framework.key, point) for framework in self.frameworks for point in POINTS]
        by_key = {framework.key: framework for framework in self.frameworks}

        def run(key: tuple[str, int] | None) -> FirstStep | None:
            if key is None:
                self.unit_s += self.workload.time_batch_loads(UNIT_BATCHES)
                return None
            first = self.resume_once(by_key[key[0]], key[1])
            self.check(by_key[key[0]], key[1], first)
            return first

        rounds = iter(range(1, repeats + 1))

        def after_round() -> None:
            progress(f"repeat {next(rounds)} of {repeats}")

        for key, firsts in h.measure(keys, repeats, rng, run, warmup=False, after_round=after_round).items():
            if key is not None:
                self.samples.setdefault(key, []).extend(firsts)

    def check(self, framework: Framework, point: int, first: FirstStep) -> None:
        """tracktrain's resume must be exact and load no skipped sample; the peers' results are only reported."""
        if framework.key != TRACKTRAIN:
            return
        step = step_of(point, self.workload.batches)
        result = verdict(first, step, framework.reference)
        if result != EXACT:
            self.problems.append(
                f"tracktrain at {point} %: the resumed run's first batch is not the reference run's "
                f"batch at step {step}: {result} (it started at step {first.step})"
            )
        if first.loads != self.workload.batch_size:
            self.problems.append(
                f"tracktrain at {point} %: {first.loads} samples were loaded before the first step, "
                f"expected one batch ({self.workload.batch_size}): skipped batches were loaded"
            )


# -------------------------------------------------------------------------------------------------- reporting
def summarize(bench: Bench, stat: str) -> tuple[list[dict[str, Any]], float]:
    """The harness's rows, a case per point: each framework's ms next to tracktrain's, with the time in batch loads,
    whether every resumed run was exact, and the samples loaded before the first step."""
    unit_ms = h.STATISTICS[stat](bench.unit_s) * 1e3
    rows = []
    for point in POINTS:
        step = step_of(point, bench.workload.batches)
        firsts = {f.key: bench.samples[f.key, point] for f in bench.frameworks if bench.samples.get((f.key, point))}
        samples = {key: [first.seconds * 1e3 for first in values] for key, values in firsts.items()}
        references = {framework.key: framework.reference for framework in bench.frameworks}
        verdicts = {
            key: sorted({verdict(first, step, references[key]) for first in values}) for key, values in firsts.items()
        }
        case = f"{point} % (step {step:,})" if point else "fresh start"
        rows += h.compare(
            case,
            samples,
            TRACKTRAIN,
            "ms",
            stat,
            point_percent=dict.fromkeys(samples, point),
            batches={key: h.STATISTICS[stat](values) / unit_ms for key, values in samples.items()},
            exact={key: "yes" if value == [EXACT] else ", ".join(value) for key, value in verdicts.items()},
            loads={key: sorted({first.loads for first in values}) for key, values in firsts.items()},
        )
    return rows, unit_ms


def report(bench: Bench, rows: list[dict[str, Any]], unit_ms: float, notes: list[str]) -> None:
    print(f"\n## Resume: from the call that resumes to the first training step\n\n$ {h.command_line()}")
    h.report(rows, "batches", "exact", "loads", decimals=1)
    print(
        "value: the time from the call that resumes (fit(..., ckpt_path=...); Ignite: torch.load + "
        "Checkpoint.load_objects + run) to the start of the first training step, its batch loaded; batches: that "
        f"time in batch loads ({unit_ms:.3f} ms each; loading the skipped batches would cost step × that). fresh "
        "start: the same fit without a checkpoint. exact: the first resumed batch is the one the uninterrupted run "
        "trained at that step. loads: samples loaded before the first step."
    )
    for framework in bench.frameworks:
        firsts = [first for (key, point), values in bench.samples.items() if key == framework.key for first in values]
        said = list(dict.fromkeys(w for first in firsts for w in first.warnings if RESUME_WORDS.search(w)))
        print(
            f"- {LABELS[framework.key]}: "
            + (f"it warned: {'; '.join(repr(w[:200]) for w in said)}" if said else "no warning")
            + f". (Reference run: {framework.reference_s:.1f} s.)"
        )
    for note in notes:
        print(f"- {note}")


# ------------------------------------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    def options(add: Callable[..., Any]) -> None:
        add("--batch-size", type=int, default=8, help="samples per batch (default 8)")
        add("--sample-us", type=float, default=50.0, help="CPU time to make one sample, µs (default 50)")
        add("--no-ignite", action="store_true", help="leave Ignite out")

    args = h.parse(
        __doc__,
        argv,
        {
            "batches": (10_000, 100, "batches in the epoch, a multiple of 10"),
            "repeats": (15, 1, "timed resumes per framework and point"),
        },
        options=options,
        positive=["batch_size", "repeats", "threads"],
        profile_top=25,
        root_dir="the checkpoints",
    )
    if args.batches < 20 or args.batches % 10 or args.sample_us < 0:
        sys.exit(
            "--batches must be a multiple of 10, at least 20 (checkpoints every 10 % of the epoch, and a resumed "
            f"run's one step must not be a saving one), got {args.batches}; --sample-us must not be negative"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rng = h.prepare(args)
    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")  # torchdata, on every iter()
    ignite, ignite_status = load_peer("ignite", "ignite.engine", "ignite.handlers", "ignite.utils", skip=args.no_ignite)
    lightning, lightning_status = load_peer("lightning", "lightning.pytorch", skip=args.no_lightning)
    torchdata, torchdata_status = load_peer("torchdata", "torchdata.stateful_dataloader", skip=lightning is None)
    notes = [
        f"{name}: {status}; its column is missing."
        for name, module, status in (
            ("ignite", ignite, ignite_status),
            ("lightning", lightning, lightning_status),
            ("torchdata", torchdata, torchdata_status),
        )
        if module is None and not (name == "torchdata" and not lightning)
    ]
    workload = Workload(args.batches, args.batch_size, args.sample_us, args.seed)
    frameworks = [Framework(TRACKTRAIN, run_tracktrain, tracktrain_checkpoint)]
    if ignite is not None:
        frameworks.append(Framework(IGNITE, ignite_runner(ignite), tracktrain_checkpoint))
    if lightning is not None:
        frameworks.append(Framework(LIGHTNING, lightning_runner(lightning, stateful=False), lightning_checkpoint))
        if torchdata is not None:
            frameworks.append(
                Framework(LIGHTNING_SDL, lightning_runner(lightning, stateful=True), lightning_checkpoint)
            )
    root_dir = h.temporary_root("tracktrain-bench-resume-", args.root_dir)
    bench = Bench(workload, frameworks, root_dir)

    env = h.start(
        "Resume time-to-first-step mid-epoch: tracktrain, Ignite DeterministicEngine, Lightning",
        args,
        f"{args.repeats} interleaved repeats",
        ignite=ignite_status,
        lightning=lightning_status,
        torchdata=torchdata_status,
    )
    print(f"{workload.describe()}; checkpoints every {bench.every:,} steps\n", flush=True)
    started = time.perf_counter()

    def progress(what: str) -> None:
        print(f"- {what} [{time.perf_counter() - started:.1f} s]", flush=True)

    h.freeze_garbage()  # the libraries: the collection before each run (untimed) then skips them, 0.15 s each
    bench.train_references(progress)
    bench.warm_up()
    # what lives until the end (the reference runs' batches among it) leaves the collector's sight: a full collection
    # that lands in a timed window then costs as little in one framework's run as in another's
    h.freeze_garbage()
    progress("warm-up done")
    bench.measure(args.repeats, rng, progress)
    rows, unit_ms = summarize(bench, args.stat)
    report(bench, rows, unit_ms, notes)
    if args.profile:
        for framework in frameworks:
            bench.profile(framework, POINTS[-1], args.profile_top)
    return h.finish(
        args,
        {
            "environment": env,
            "arguments": vars(args),
            "workload": workload.describe(),
            "frameworks": [framework.key for framework in frameworks],
            "batch_load_ms": unit_ms,
            "batch_load_samples_ms": [value * 1e3 for value in bench.unit_s],
            "reference_s": {framework.key: framework.reference_s for framework in frameworks},
            "rows": rows,
            "notes": notes,
        },
        bench.problems,
    )


if __name__ == "__main__":
    sys.exit(main())
