#!/usr/bin/env python
"""Training-loop stall per checkpoint, time until the checkpoint is committed, and resume time: tracktrain's
`ModelCheckpoint` with `async_save=True` and `False`, next to Lightning's `ModelCheckpoint`, on a local disk and
on S3 (moto's server), for a ~100 MB state (an MLP of 8.4 M parameters and its AdamW moments).

Two clock hooks (the network's forward pre-hook, the optimizer's step post-hook) time every step of both frameworks
alike; what stall, added, committed after and resume are is in benchmarks/README.md.

    .venv/bin/python benchmarks/bench_checkpoint.py --quick        # smoke test, ~5 MB state, ~20 s
    .venv/bin/python benchmarks/bench_checkpoint.py                # the real run, ~100 MB state, ~3.5 min

Timing never makes this script fail; it exits with status 1 when a fit took the wrong number of steps, a checkpoint
is missing, incomplete or does not load, checkpoints of the same step hold different tensors (Lightning's: values),
or a resumed fit did not start from the checkpoint's weights and step.
"""

from __future__ import annotations

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
    fit_tracktrain,
    lightning_fitter,
    verify_lightning_dir,
    verify_tracktrain_dir,
)
from checkpoint_storage import LOCAL, S3, MotoServer, Storage, start_s3
from workloads import load_peer, state_difference

TT_ASYNC, TT_BLOCKING = "tracktrain async", "tracktrain blocking"
SAVING_VARIANTS = (TT_ASYNC, TT_BLOCKING, LIGHTNING)
DESCRIPTIONS = {
    TT_ASYNC: "tracktrain ModelCheckpoint(async_save=True)",
    TT_BLOCKING: "tracktrain ModelCheckpoint(async_save=False)",
    LIGHTNING: "Lightning ModelCheckpoint (torch.save, blocking)",
}
FULL_SIZES, QUICK_SIZES = (1024, 2048, 2048, 1024, 10), (256, 512, 512, 10)  # ~100.8 MB and ~4.8 MB of state


def library_of(variant: str) -> str:
    return LIGHTNING if variant == LIGHTNING else TRACKTRAIN


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


LEAD_IN_SKIP = 2  # a fit's first steps (first calls on its fresh network and optimizer) are not a baseline


@dataclass
class Baseline:
    """The same fit's steps before its first checkpoint, the first `LEAD_IN_SKIP` left out: medians (s) of the gap
    between two steps and of the period from one step's end to the next one's."""

    gap: float
    period: float


def lead_in_baseline(fit: Fit, every: int) -> Baseline:
    """From the steps before the first save (step `every`): taken in the same fit, so that the machine's speed,
    which drifts from fit to fit on a shared machine, is the same as during the saves. (Clock lists count from 0.)"""
    starts, ends = fit.clock.forward_starts, fit.clock.step_ends
    lead_in = range(LEAD_IN_SKIP, every - 1)  # step i+1 ends, step i+2 starts; the last one starts step `every`
    gaps = [starts[i + 1] - ends[i] for i in lead_in]
    periods = [ends[i + 1] - ends[i] for i in lead_in if i + 1 < every - 1]
    return Baseline(statistics.median(gaps), statistics.median(periods))


@dataclass
class SaveSample:
    stall: float  # s
    added: float  # s
    committed_after: float  # s


def save_samples(fit: Fit, baseline: Baseline, save_steps: list[int], every: int) -> list[SaveSample]:
    """One sample per checkpoint: the stall (the gap from the saving step's end to the next step's start, beyond the
    lead-in's), the time added (the `every` steps from the saving one, beyond `every` lead-in periods) and the commit
    (the saving step's end to the checkpoint's commit). Steps count from 1, the clock's lists from 0."""
    starts, ends = fit.clock.forward_starts, fit.clock.step_ends
    commit_times = [moment for _, moment in fit.commits]
    samples = []
    for k, step in enumerate(save_steps):
        gap = starts[step] - ends[step - 1]
        window = ends[step + every - 2] - ends[step - 2]
        samples.append(
            SaveSample(gap - baseline.gap, window - every * baseline.period, commit_times[k] - ends[step - 1])
        )
    return samples


@dataclass
class Case:
    storage: Storage
    variant: str
    library: str
    samples: list[SaveSample] = field(default_factory=list)
    checkpoint_bytes: list[int] = field(default_factory=list)
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
        self.notes: list[str] = []
        self.stat = "median"
        # (library, step) -> the tensors of that library's first checkpoint of that step
        self.references: dict[tuple[str, int], dict[str, torch.Tensor]] = {}
        self.lightning_identical: dict[int, bool] = {}  # step -> Lightning's checkpoint is tracktrain's bit for bit
        self.kept: dict[tuple[str, str], tuple[str, str]] = {}  # (storage, library) -> (directory, newest file)
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
            if timed and len(fit.commits) == saves and len(fit.clock.step_ends) == max_steps:
                case.samples += save_samples(fit, lead_in_baseline(fit, every), save_steps, every)
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
            difference = state_difference(tensors, reference, exact=case.library == TRACKTRAIN)
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
        difference = state_difference(theirs, ours, exact=False)
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
        each next to the same fit from scratch, interleaved on the harness without a warm-up (the saving fits were
        one); the clock runs from the Trainer's construction to the first forward."""
        rows = []
        for storage in self.storages:
            every = self.settings.every[storage.key]
            newest = self.settings.saves * every
            variants: list[tuple[str, str, str | None]] = []  # (library, how, ckpt_path)
            for library in self.fitters:
                if (storage.key, library) in self.kept:
                    newest_file = self.kept[(storage.key, library)][1]
                    variants += [(library, "from scratch", None), (library, "ckpt_path=<file>", newest_file)]
                    variants += [(library, 'ckpt_path="last"', "last")] if library == TRACKTRAIN else []
            errors: dict[str, str] = {}

            def resume(variant: tuple[str, str, str | None]) -> float | None:
                library, how, ckpt_path = variant
                directory = self.kept[(storage.key, library)][0] if ckpt_path else storage.new_dir()
                max_steps = newest + 1 if ckpt_path else 1
                where = f"[{storage.key}] {library} resume {how}"
                try:
                    fit = self.run(library, max_steps, directory, every, ckpt_path=ckpt_path)
                except Exception as error:  # Lightning's: said in the notes; tracktrain's: also a failed check
                    errors[f"{library} {how}"] = f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:160]}"
                    if library == TRACKTRAIN:
                        self.problems.append(f"{where}: the fit failed: {errors[f'{library} {how}']}")
                    return None
                finally:
                    if not ckpt_path:
                        storage.remove(directory)
                if fit.global_step != max_steps or len(fit.clock.step_ends) != 1:
                    self.problems.append(
                        f"{where}: ended at step {fit.global_step} after {len(fit.clock.step_ends)} step(s), "
                        f"expected {max_steps} after 1"
                    )
                reference = self.references.get((library, newest))
                if ckpt_path and reference is not None and fit.first_weights is not None:
                    model = {name: value for name, value in reference.items() if name.startswith("model/")}
                    weights = {f"model/net.{name}": value for name, value in fit.first_weights.items()}
                    difference = state_difference(weights, model, exact=library == TRACKTRAIN)
                    if difference is not None:
                        self.problems.append(
                            f"{where}: the first step did not start from the checkpoint's weights: {difference}"
                        )
                return (fit.clock.forward_starts[0] - fit.started) * 1e3

            samples = h.measure(
                variants, self.settings.resume_repeats, self.rng, resume, False, label=lambda v: f"{v[0]} {v[1]}"
            )
            self.notes += [f"{storage.key}: {name} failed: {error}" for name, error in errors.items()]
            named = {name: [value for value in values if value is not None] for name, values in samples.items()}
            named = {name: values for name, values in named.items() if values}
            bases = {name: f"{name.split()[0]} from scratch" for name in named}
            rows += h.compare(f"{storage.key}: resume, to the first step", named, bases, "ms", self.stat)
        return rows

    def save_rows(self) -> list[dict[str, Any]]:
        """Per storage, the stall, added time and commit per checkpoint of each variant next to Lightning's, with
        the checkpoints' size."""
        rows = []
        for storage in self.storages:
            cases = [case for case in self.cases.values() if case.storage is storage]
            for case in cases:
                if case.error is not None:
                    self.notes.append(f"{storage.key}: {DESCRIPTIONS[case.variant]} cannot save there: {case.error}")
            cases = [case for case in cases if case.samples]
            extra = {"MB": {DESCRIPTIONS[c.variant]: statistics.median(c.checkpoint_bytes) / 1e6 for c in cases}}
            every = self.settings.every[storage.key]
            for name in ("stall", "added", "committed_after"):
                samples = {DESCRIPTIONS[c.variant]: [getattr(s, name) * 1e3 for s in c.samples] for c in cases}
                case = f"{storage.key}, every {every} steps: {name.replace('_', ' ')}"
                rows += h.compare(
                    case, samples, DESCRIPTIONS[LIGHTNING], "ms", self.stat, **(extra if name == "stall" else {})
                )
        return rows

    def release(self) -> None:
        for (storage_key, _), (directory, _) in self.kept.items():
            next(storage for storage in self.storages if storage.key == storage_key).remove(directory)
        self.kept.clear()


# ------------------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    args = h.parse(
        __doc__,
        argv,
        {
            "repeats": (3, 1, "timed fits per variant and storage"),
            "saves": (3, 2, "checkpoints per timed fit"),
            "every_local": (20, 6, "steps between checkpoints on the local disk"),
            "every_s3": (50, 6, "steps between checkpoints on S3"),
            "resume_repeats": (3, 1, "fits per resume variant"),
            "batch_size": (4, 4, "batch size (the step is mostly AdamW's update)"),
        },
        options=lambda add: add("--storages", default="local,s3", help="comma-separated: local, s3 (default both)"),
        positive=["repeats", "saves", "resume_repeats", "batch_size", "threads"],
        root_dir="the local checkpoints and run directories",
        stat_of="the checkpoints",
    )
    if min(args.every_local, args.every_s3) < LEAD_IN_SKIP + 3 or set(args.storages.split(",")) - {LOCAL, S3}:
        sys.exit(
            f"--every-local/--every-s3 must be at least {LEAD_IN_SKIP + 3} (the steps before the first save, but "
            f"the first {LEAD_IN_SKIP}, are the baseline); --storages takes local, s3"
        )
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
    bench.stat, bench.notes = args.stat, notes

    h.freeze_garbage()
    env = h.start(
        "Checkpoint stall, commit and resume: tracktrain (async, blocking) and Lightning",
        args,
        f"{args.repeats} interleaved repeats of {args.saves} checkpoints",
        lightning=lightning_status,
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
        rows = bench.save_rows() + bench.measure_resume()
        print(f"- resume fits done [{time.perf_counter() - started:.1f} s]", flush=True)
    finally:
        bench.release()
        moto.stop()
    h.report(rows, "MB", decimals=1)
    print(
        "stall, added, committed after: per checkpoint, over every checkpoint of every repeat. resume: the Trainer's "
        "construction to the first forward; − vs from scratch is what loading costs."
    )
    if bench.lightning_identical:
        how = "bit for bit" if all(bench.lightning_identical.values()) else "within rtol=1e-5, not all bit for bit"
        notes.append(
            f"Lightning's checkpoints of steps {sorted(bench.lightning_identical)} hold tracktrain's tensors ({how})"
        )
    for note in notes:
        print(f"- {note}")
    payload = {"environment": env, "arguments": vars(args), "workload": workload.describe(), "rows": rows}
    payload |= {"state_mb": workload.state_mb, "notes": notes, "lightning_bit_identical": bench.lightning_identical}
    return h.finish(args, payload, bench.problems)


if __name__ == "__main__":
    sys.exit(main())
