#!/usr/bin/env python
"""Training-loop stall per checkpoint, time until the checkpoint is committed, and resume time: tracktrain's
`ModelCheckpoint` with `async_save=True` and `False`, next to Lightning's `ModelCheckpoint`, on a local disk and
on S3 (moto's server), for a ~100 MB state (an MLP of 8.4 M parameters and its AdamW moments).

How the stall is measured (the same way for both frameworks). Two hooks read `time.perf_counter()`: a forward
pre-hook on the network (a step starts) and a step post-hook on the AdamW optimizer (a step's update is done).
Both frameworks call both exactly once per step and save in their `on_train_batch_end` hook, which runs between
them, so the **gap** from the end of step s to the start of step s+1 holds everything the training thread does
for a save after step s (for tracktrain's async save: wait for the previous write, if still running, and the CPU
snapshot; for the blocking saves: serializing, writing and committing), plus what each framework does between two
steps anyway (its hooks, the next batch). The latter is taken out: **stall at the save** = gap after a saving step
− the median gap between the steps of the same fit before its first checkpoint (the first two left out). That is
what the loop waits for at the save. A background write also takes CPU (and the GIL) from the steps that follow,
so the total is reported too: **added per checkpoint** = the time of the N steps from the end of step s−1 to the
end of step s+N−1 (the saving step and the steps before the next save) − N × the median step period before the
first checkpoint. The baseline comes from the same fit because the machine's speed drifts from fit to fit.
**Committed after** runs from the end of step s to the moment the checkpoint is complete on storage, read by a
thin subclass of each framework's `ModelCheckpoint`: for tracktrain in `_after_commit` (right after a blocking
save; queued behind the save on the writer thread for an async one, so read once the file and its manifest are
written), for Lightning when `_save_checkpoint` returns (its saves are blocking).

**Resume** is timed from the start of the Trainer's construction to the first step's forward, with `fit(...,
ckpt_path=<the newest checkpoint>)` (tracktrain also with `ckpt_path="last"`, which finds it), next to the same
fit from scratch; the difference is what loading costs.

    .venv/bin/python benchmarks/bench_checkpoint.py --quick        # smoke test, ~5 MB state, ~20 s
    .venv/bin/python benchmarks/bench_checkpoint.py                # the real run, ~100 MB state, ~3.5 min

Timing never makes this script fail. It exits with status 1 only when a sanity check fails: a fit took the wrong
number of steps, a checkpoint written is missing, incomplete (tracktrain: no manifest or a SHA-256 mismatch) or
does not load, the async and blocking checkpoints of the same step hold different tensors (or Lightning's holds
different values), or a resumed fit did not start from the checkpoint's weights and step.
See benchmarks/README.md for how to read the tables.
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
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
from checkpoint_fits import (
    LIGHTNING,
    TRACKTRAIN,
    Fit,
    Workload,
    bit_identical,
    checkpoint_tensors,
    compare,
    fit_tracktrain,
    lightning_fitter,
    verify_lightning_dir,
    verify_tracktrain_dir,
)
from checkpoint_report import (
    SAVING_VARIANTS,
    TT_ASYNC,
    TT_BLOCKING,
    library_of,
    report,
    summarize_case,
    summarize_resume,
)
from checkpoint_storage import LOCAL, S3, MotoServer, Storage, start_s3
from workloads import load_peer

FULL_SIZES, QUICK_SIZES = (1024, 2048, 2048, 1024, 10), (256, 512, 512, 10)  # ~100.8 MB and ~4.8 MB of state


# ------------------------------------------------------------------------------------------------ measurement
@dataclass
class Settings:
    saves: int  # checkpoints per timed fit
    every: dict[str, int]  # storage -> steps between checkpoints
    repeats: int
    resume_repeats: int
    threads: int

    def max_steps(self, storage: str) -> int:
        """Saves at every, 2·every, ..., saves·every; then every−1 more steps, so the last save's window ends
        before a save that is not measured would start."""
        return (self.saves + 1) * self.every[storage] - 1

    def save_steps(self, storage: str) -> list[int]:
        return [self.every[storage] * k for k in range(1, self.saves + 1)]


LEAD_IN_SKIP = 2  # a fit's first steps (first calls on its fresh network and optimizer) are not a baseline


@dataclass
class Baseline:
    """The same fit's steps before its first checkpoint, the first `LEAD_IN_SKIP` left out: medians (s) of the gap
    between two steps, of the period from one step's end to the next one's, and of a step."""

    gap: float
    period: float
    step: float  # forward start to optimizer step end


def lead_in_baseline(fit: Fit, every: int) -> Baseline:
    """From the steps before the first save (step `every`): taken in the same fit, so that the machine's speed,
    which drifts from fit to fit on a shared machine, is the same as during the saves. (Clock lists count from 0.)"""
    starts, ends = fit.clock.forward_starts, fit.clock.step_ends
    lead_in = range(LEAD_IN_SKIP, every - 1)  # step i+1 ends, step i+2 starts; the last one starts step `every`
    gaps = [starts[i + 1] - ends[i] for i in lead_in]
    periods = [ends[i + 1] - ends[i] for i in lead_in if i + 1 < every - 1]
    steps = [ends[i] - starts[i] for i in lead_in]
    return Baseline(statistics.median(gaps), statistics.median(periods), statistics.median(steps))


@dataclass
class SaveSample:
    stall: float  # s
    added: float  # s
    committed_after: float  # s
    waited: bool  # the save started while the previous one was still being written


def save_samples(fit: Fit, baseline: Baseline, save_steps: list[int], every: int) -> list[SaveSample]:
    """One sample per checkpoint (see the module docstring); steps are counted from 1, the clock's lists from 0."""
    starts, ends = fit.clock.forward_starts, fit.clock.step_ends
    commit_times = [moment for _, moment in fit.commits]
    samples = []
    for k, step in enumerate(save_steps):
        gap = starts[step] - ends[step - 1]
        window = ends[step + every - 2] - ends[step - 2]
        waited = k > 0 and commit_times[k - 1] > ends[step - 1]
        samples.append(
            SaveSample(gap - baseline.gap, window - every * baseline.period, commit_times[k] - ends[step - 1], waited)
        )
    return samples


@dataclass
class Case:
    storage: Storage
    variant: str
    library: str
    samples: list[SaveSample] = field(default_factory=list)
    checkpoint_bytes: list[int] = field(default_factory=list)
    server_cpu: list[float] = field(default_factory=list)  # s of the storage server's CPU per checkpoint, per fit
    error: str | None = None


class Bench:
    """Runs the fits and their checks; `problems` collects what the sanity checks found."""

    def __init__(
        self,
        workload: Workload,
        settings: Settings,
        fitters: dict[str, Callable[..., Fit]],
        storages: list[Storage],
        root_dir: str,
        rng: random.Random,
    ) -> None:
        self.workload = workload
        self.settings = settings
        self.fitters = fitters  # library -> fit function
        self.storages = storages
        self.root_dir = root_dir
        self.rng = rng
        self.problems: list[str] = []
        # (library, step) -> the tensors of that library's first checkpoint of that step
        self.references: dict[tuple[str, int], dict[str, torch.Tensor]] = {}
        self.lightning_identical: dict[int, bool] = {}  # step -> Lightning's checkpoint is tracktrain's bit for bit
        self.kept: dict[tuple[str, str], tuple[str, str]] = {}  # (storage, library) -> (directory, newest file)
        self.baselines: dict[str, list[Baseline]] = {}  # variant -> each timed fit's lead-in
        self.cases = {
            (storage.key, variant): Case(storage, variant, library_of(variant))
            for storage in storages
            for variant in SAVING_VARIANTS
            if library_of(variant) in fitters
        }

    # ------------------------------------------------------------------------------------------------- fits
    def run(
        self,
        library: str,
        max_steps: int,
        directory: str | None,
        every: int,
        async_save: bool = True,
        ckpt_path: str | None = None,
    ) -> Fit:
        run_dir = tempfile.mkdtemp(prefix="run-", dir=self.root_dir)
        try:
            h.before_run(self.settings.threads)
            return self.fitters[library](self.workload, max_steps, run_dir, directory, every, async_save, ckpt_path)
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)

    def saving_fit(
        self, case: Case, timed: bool = True, keep: bool = False, saves: int | None = None, every: int | None = None
    ) -> None:
        """One fit that saves `saves` checkpoints every `every` steps (default: the settings'), then its checks;
        its samples go to `case` if `timed`. A library that cannot save there at all is noted in `case.error` (for
        tracktrain that is also a failed check)."""
        storage, settings = case.storage, self.settings
        every = every or settings.every[storage.key]
        saves = saves or settings.saves
        save_steps = [every * k for k in range(1, saves + 1)]
        max_steps = (saves + 1) * every - 1
        directory = storage.new_dir()
        where = f"[{storage.key}] {case.variant}"
        newest = None
        server_cpu = storage.server_cpu()
        try:
            fit = self.run(case.library, max_steps, directory, every, async_save=case.variant != TT_BLOCKING)
        except Exception as error:  # a library that cannot save there: said in the table
            storage.remove(directory)
            case.error = f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:160]}"
            if case.library == TRACKTRAIN:
                self.problems.append(f"{where}: the fit failed: {case.error}")
            return
        try:
            if fit.global_step != max_steps or len(fit.clock.step_ends) != max_steps:
                self.problems.append(f"{where}: {fit.global_step} steps, expected {max_steps}")
            if len(fit.commits) != saves:
                self.problems.append(f"{where}: {len(fit.commits)} checkpoints committed, expected {saves}")
            newest = self.check_files(case, directory, save_steps, where)
            if timed and server_cpu is not None:
                case.server_cpu.append((storage.server_cpu() - server_cpu) / saves)
            if timed and len(fit.commits) == saves and len(fit.clock.step_ends) == max_steps:
                baseline = lead_in_baseline(fit, every)
                self.baselines.setdefault(case.variant, []).append(baseline)
                case.samples += save_samples(fit, baseline, save_steps, every)
        finally:
            if keep and newest is not None:
                self.kept[(storage.key, case.library)] = (directory, newest)
            else:
                storage.remove(directory)

    def check_files(self, case: Case, directory: str, save_steps: list[int], where: str) -> str | None:
        """Every checkpoint is complete and loads; the newest holds the same tensors as tracktrain's first one of
        that step (bit for bit for tracktrain, within rtol=1e-5 for Lightning). Returns the newest's URL."""
        verify = verify_tracktrain_dir if case.library == TRACKTRAIN else verify_lightning_dir
        loaded = verify(case.storage, directory, save_steps, where, self.problems)
        sizes = case.storage.files(directory)
        case.checkpoint_bytes += [size for name, size in sizes.items() if name.endswith((".pt", ".ckpt"))]
        newest = save_steps[-1]
        if newest not in loaded:
            return None
        url, state = loaded[newest]
        tensors = checkpoint_tensors(state, case.library)
        reference = self.references.setdefault((case.library, newest), tensors)
        if reference is not tensors:
            # every fit trains the same weights on the same batches: tracktrain's async and blocking checkpoints of
            # a step, on either storage, must be the same bit for bit
            difference = compare(tensors, reference, exact=case.library == TRACKTRAIN)
            if difference is not None:
                self.problems.append(
                    f"{where}: its checkpoint of step {newest} differs from the first {case.library} "
                    f"checkpoint of that step: {difference}"
                )
        self.cross_check(newest)
        return url

    def cross_check(self, step: int) -> None:
        """Once both libraries wrote a checkpoint of `step`: Lightning's holds tracktrain's values (the same
        arithmetic; within rtol=1e-5, and whether bit for bit is noted)."""
        ours, theirs = self.references.get((TRACKTRAIN, step)), self.references.get((LIGHTNING, step))
        if ours is None or theirs is None or step in self.lightning_identical:
            return
        difference = compare(theirs, ours, exact=False)
        if difference is not None:
            self.problems.append(f"Lightning's checkpoint of step {step} differs from tracktrain's: {difference}")
        self.lightning_identical[step] = difference is None and bit_identical(theirs, ours)

    # ------------------------------------------------------------------------------------------------ phases
    def warm_up(self) -> None:
        """One untimed short fit of each variant, saving once (first calls, lazy imports, the S3 client's
        connections); its checks run as for every fit."""
        for case in self.cases.values():
            self.saving_fit(case, timed=False, saves=1, every=2)

    def measure(self, on_repeat: Callable[[int], None]) -> None:
        """R repeats; in each, every case once, in a shuffled order. The first repeat keeps each library's files
        for the resume fits."""
        rounds = [0]

        def run(case: Case) -> None:
            self.saving_fit(case, keep=rounds[0] == 0 and case.variant in (TT_ASYNC, LIGHTNING))

        def after_round() -> None:
            on_repeat(rounds[0])
            rounds[0] += 1

        cases = list(self.cases.values())
        h.measure(cases, self.settings.repeats, self.rng, run, False, after_round, label=lambda case: case.variant)

    def measure_resume(self) -> list[dict[str, Any]]:
        """Per storage and library: fits resumed from the newest kept checkpoint (tracktrain also with "last"),
        each next to the same fit from scratch; the clock runs from the Trainer's construction to the first
        forward."""
        settings = self.settings
        rows = []
        for storage in self.storages:
            every = settings.every[storage.key]
            newest = settings.save_steps(storage.key)[-1]
            variants: list[tuple[str, str, str | None]] = []  # (library, how, ckpt_path)
            for library in self.fitters:
                kept = self.kept.get((storage.key, library))
                if kept is None:
                    continue
                directory, newest_file = kept
                variants.append((library, "from scratch", None))
                variants.append((library, "ckpt_path=<file>", newest_file))
                if library == TRACKTRAIN:
                    variants.append((library, 'ckpt_path="last"', "last"))
            samples: dict[tuple[str, str], list[float]] = {(library, how): [] for library, how, _ in variants}
            errors: dict[tuple[str, str], str] = {}
            for _ in range(settings.resume_repeats):
                for _, (library, how, ckpt_path) in h.interleaved(variants, 1, self.rng):
                    directory = self.kept[(storage.key, library)][0] if ckpt_path else storage.new_dir()
                    max_steps = newest + 1 if ckpt_path else 1
                    where = f"[{storage.key}] {library} resume {how}"
                    try:
                        fit = self.run(library, max_steps, directory, every, ckpt_path=ckpt_path)
                    except Exception as error:  # Lightning's: said in the table; tracktrain's: also a failed check
                        errors[(library, how)] = f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:160]}"
                        if library == TRACKTRAIN:
                            self.problems.append(f"{where}: the fit failed: {errors[(library, how)]}")
                        continue
                    finally:
                        if not ckpt_path:
                            storage.remove(directory)
                    if fit.global_step != max_steps or len(fit.clock.step_ends) != 1:
                        self.problems.append(
                            f"{where}: ended at step {fit.global_step} after "
                            f"{len(fit.clock.step_ends)} step(s), expected {max_steps} after 1"
                        )
                    reference = self.references.get((library, newest))
                    if ckpt_path and reference is not None and fit.first_weights is not None:
                        model = {name: value for name, value in reference.items() if name.startswith("model/")}
                        weights = {f"model/net.{name}": value for name, value in fit.first_weights.items()}
                        difference = compare(weights, model, exact=library == TRACKTRAIN)
                        if difference is not None:
                            self.problems.append(
                                f"{where}: the first step did not start from the checkpoint's weights: {difference}"
                            )
                    samples[(library, how)].append(fit.clock.forward_starts[0] - fit.started)
            for (library, how), values in samples.items():
                rows.append(
                    {
                        "storage": storage.key,
                        "library": library,
                        "how": how,
                        "samples_s": values,
                        "error": errors.get((library, how)),
                    }
                )
        return rows

    def release(self) -> None:
        for (storage_key, _), (directory, _) in self.kept.items():
            next(storage for storage in self.storages if storage.key == storage_key).remove(directory)
        self.kept.clear()


# ------------------------------------------------------------------------------------------------------ main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = h.make_parser(__doc__, root_dir="the local checkpoints and run directories", stat_of="the checkpoints")
    add = parser.add_argument
    add("--repeats", type=int, help="timed fits per variant and storage (default 3; --quick 1)")
    add("--saves", type=int, help="checkpoints per timed fit (default 3; --quick 2)")
    add("--every-local", type=int, help="steps between checkpoints on the local disk (default 20; --quick 6)")
    add("--every-s3", type=int, help="steps between checkpoints on S3 (default 50; --quick 6)")
    add("--resume-repeats", type=int, help="fits per resume variant (default 3; --quick 1)")
    add("--storages", default="local,s3", help="comma-separated: local, s3 (default both)")
    add("--batch-size", type=int, default=4, help="batch size (default 4: the step is mostly AdamW's update)")
    defaults = {
        "repeats": (3, 1),
        "saves": (3, 2),
        "every_local": (20, 6),
        "every_s3": (50, 6),
        "resume_repeats": (3, 1),
    }
    args = h.finish_args(
        parser, argv, defaults, positive=["repeats", "saves", "resume_repeats", "batch_size", "threads"]
    )
    for name in ("every_local", "every_s3"):
        if getattr(args, name) < LEAD_IN_SKIP + 3:
            parser.error(
                f"--{name.replace('_', '-')} must be at least {LEAD_IN_SKIP + 3} (the steps before the "
                f"first save, but the first {LEAD_IN_SKIP}, are the baseline)"
            )
    unknown = set(args.storages.split(",")) - {LOCAL, S3}
    if unknown:
        parser.error(f"--storages: unknown storage(s) {sorted(unknown)}; use local, s3")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rng = h.prepare(args)
    lightning, lightning_status = load_peer("lightning", "lightning.pytorch.callbacks", skip=args.no_lightning)
    notes = [] if lightning is not None else [f"lightning: {lightning_status}; its rows are missing."]
    wanted = args.storages.split(",")
    missing = [name for name in ("moto", "s3fs") if importlib.util.find_spec(name) is None]
    if S3 in wanted and missing:
        wanted.remove(S3)
        notes.append(f"s3: left out, {' and '.join(missing)} not installed (pip install 'moto[server]' s3fs).")
    settings = Settings(
        args.saves, {LOCAL: args.every_local, S3: args.every_s3}, args.repeats, args.resume_repeats, args.threads
    )
    batches = max(settings.max_steps(key) for key in (LOCAL, S3)) + 2  # one epoch holds every fit
    workload = Workload(QUICK_SIZES if args.quick else FULL_SIZES, args.batch_size, batches, args.seed)
    root_dir = h.temporary_root("tracktrain-bench-checkpoint-", args.root_dir)
    storages = []
    if LOCAL in wanted:
        os.makedirs(os.path.join(root_dir, "checkpoints"))
        storages.append(Storage(LOCAL, os.path.join(root_dir, "checkpoints")))
    moto = MotoServer()
    atexit.register(moto.stop)
    if S3 in wanted:
        storages.append(start_s3(moto))
    fitters: dict[str, Callable[..., Fit]] = {TRACKTRAIN: fit_tracktrain}
    if lightning is not None:
        fitters[LIGHTNING] = lightning_fitter(lightning)
    bench = Bench(workload, settings, fitters, storages, root_dir, rng)

    h.freeze_garbage()
    env = h.environment(args.threads, lightning=lightning_status)
    h.print_heading(
        "Checkpoint stall, commit and resume: tracktrain (async, blocking) and Lightning",
        env,
        args,
        f"lightning {lightning_status}",
        f"{args.repeats} interleaved repeats of {args.saves} checkpoints",
    )
    where = {LOCAL: f"local disk under {root_dir}", S3: "S3 on a moto server (a child process on 127.0.0.1)"}
    print(
        f"{workload.describe()}; "
        + "; ".join(
            f"{where[storage.key]}, a checkpoint every {settings.every[storage.key]} steps" for storage in storages
        )
        + "\n",
        flush=True,
    )
    started = time.perf_counter()
    try:
        bench.warm_up()
        print(f"- warm-up done [{time.perf_counter() - started:.1f} s]", flush=True)
        bench.measure(
            lambda repeat: print(
                f"- repeat {repeat + 1} of {args.repeats} done [{time.perf_counter() - started:.1f} s]", flush=True
            )
        )
        resume_rows = summarize_resume(bench.measure_resume(), args.stat)
        print(f"- resume fits done [{time.perf_counter() - started:.1f} s]", flush=True)
    finally:
        bench.release()
        moto.stop()
    rows = [summarize_case(case, settings, args.stat) for case in bench.cases.values()]
    report(rows, resume_rows, bench.baselines, bench.lightning_identical, args.stat, lightning_status, notes)
    return h.finish(
        args,
        {
            "environment": env,
            "arguments": vars(args),
            "workload": workload.describe(),
            "state_mb": workload.state_mb,
            "rows": rows,
            "resume": resume_rows,
            "baselines": {library: [vars(b) for b in values] for library, values in bench.baselines.items()},
            "lightning_bit_identical": {str(step): same for step, same in bench.lightning_identical.items()},
            "notes": notes,
        },
        bench.problems,
    )


if __name__ == "__main__":
    sys.exit(main())
