#!/usr/bin/env python
"""Resume time-to-first-step in the middle of a long epoch: tracktrain's `Trainer` (a `ResumableEngine`), Ignite's
`DeterministicEngine` and Lightning's `Trainer` (with a plain DataLoader, and with torchdata's `StatefulDataLoader`),
resumed from a checkpoint written at 10 %, 50 % and 90 % of the epoch, side by side in one process.

The workload is a long epoch whose data costs something: a map-style dataset whose samples each take a fixed
`--sample-us` of CPU to make (a spin, like a small decode), 10 000 batches of 8, shuffled, and a small MLP. A
framework that replays the epoch up to the resume point by loading it would pay 9 000 batch loads at 90 %.

Each framework first trains once from scratch to just past 90 % of the epoch, with its own checkpoint callback
saving every 10 % (tracktrain's and Lightning's `ModelCheckpoint(every_n_train_steps=N)`, Ignite's `Checkpoint`
every N iterations), and records the sample indices of every batch: that run is the uninterrupted reference. Then,
in R interleaved repeats, every framework resumes from its checkpoints of 10 %, 50 % and 90 % (and starts a fit
without one, the baseline), each time with a new model, optimizer, loader and trainer (built outside the timing) and
the same directories as its first run, as when the same command runs again:

- **time to the first step**: from the call that resumes (`fit(..., ckpt_path=...)`; Ignite: `torch.load` +
  `Checkpoint.load_objects` + `engine.run`) until the first training step of the resumed run starts, its batch
  loaded (tracktrain and Ignite: `ITERATION_STARTED`; Lightning: `on_train_batch_start`). Checkpoint loading and the
  data skip are in; process start, imports and building the objects are not.
- **one batch load**, the unit: `next()` on a plain DataLoader over the same dataset (8 samples and the collate),
  timed in the same repeats; a time to the first step is also shown as that many batch loads.
- **exact**: the first resumed batch holds the same sample indices as the batch the reference run trained at that
  step, and the step count was restored. The samples loaded before the first step are counted.

    .venv/bin/python benchmarks/bench_resume.py --quick   # smoke test, 200 batches, ~6 s
    .venv/bin/python benchmarks/bench_resume.py           # the real run, 10 000 batches, ~45 s on 2 cores

Timing never makes this script fail. It exits with status 1 only when a sanity check of tracktrain fails: a
checkpoint is missing, its resumed run does not start at the checkpoint's step with the reference run's batch, or it
loaded samples of the skipped batches. The peers' results are reported, whatever they are.
See benchmarks/README.md for how to read the table.
"""

from __future__ import annotations

import argparse
import atexit
import cProfile
import gc
import os
import pstats
import random
import re
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from _common import (
    STATISTICS, command_line, environment, exit_status, format_cell, interleaved, load_peer, make_mlp,
    markdown_table, print_heading, quartiles, write_json,
)
from tracktrain import LoopModule
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.engine import Events
from tracktrain.trainer import Trainer

TRACKTRAIN, IGNITE, LIGHTNING, LIGHTNING_SDL = "tracktrain", "ignite", "lightning", "lightning+sdl"
LABELS = {
    TRACKTRAIN: "tracktrain",
    IGNITE: "Ignite DeterministicEngine",
    LIGHTNING: "Lightning",
    LIGHTNING_SDL: "Lightning + StatefulDataLoader",
}
SHORT = {TRACKTRAIN: "tt", IGNITE: "Ignite", LIGHTNING: "L", LIGHTNING_SDL: "L+SDL"}
POINTS = (0, 10, 50, 90)  # % of the epoch at the checkpoint; 0: a fit without one (the baseline)
SIZES = (32, 64, 10)
LEARNING_RATE = 0.01
UNIT_BATCHES = 20  # batch loads timed per repeat for the unit
# how a first resumed batch compares with the reference run's batches
EXACT, REPLAYED, OTHER, WRONG_STEP = "exact", "epoch replayed from its 1st batch", "another order", "wrong step"
RESUME_WORDS = re.compile(r"resum(ing|able)", re.IGNORECASE)  # the warnings about resuming that the report quotes


# ------------------------------------------------------------------------------------------------- workload
class CostlyDataset(Dataset):
    """Sample `i` is (features, label, i) and costs `cost_s` of CPU to make: a small computation, then a spin until
    the cost is reached, so that every load costs the same however fast the machine is. `loads` counts them."""

    def __init__(self, samples: int, features: int, classes: int, cost_s: float) -> None:
        self.samples, self.features, self.classes, self.cost_s = samples, features, classes, cost_s
        self.loads = 0
        self._frequencies = torch.arange(1, features + 1, dtype=torch.float32) / features

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, int]:
        deadline = time.perf_counter() + self.cost_s
        self.loads += 1
        features = torch.sin(self._frequencies * (index + 1))
        while time.perf_counter() < deadline:
            pass
        return features, index % self.classes, index


class Workload:
    """The dataset, the MLP's initial weights and the seed shared by every run: each run of a framework trains a
    fresh copy of the same weights on the same data."""

    def __init__(self, batches: int, batch_size: int, sample_us: float, seed: int) -> None:
        self.batches, self.batch_size, self.seed = batches, batch_size, seed
        self.dataset = CostlyDataset(batches * batch_size, SIZES[0], SIZES[-1], sample_us * 1e-6)
        torch.manual_seed(seed)
        self._initial = {name: value.clone() for name, value in make_mlp(SIZES).state_dict().items()}

    def net(self) -> nn.Sequential:
        net = make_mlp(SIZES)
        net.load_state_dict(self._initial)
        return net

    def loader(self, stateful: bool = False) -> DataLoader:
        """The training loader as a user writes it: shuffled, in this process."""
        if stateful:
            from torchdata.stateful_dataloader import StatefulDataLoader

            return StatefulDataLoader(self.dataset, batch_size=self.batch_size, shuffle=True)
        return DataLoader(self.dataset, batch_size=self.batch_size, shuffle=True)

    def time_batch_loads(self, count: int) -> list[float]:
        """Seconds of `count` single batch loads (`next()` on a plain DataLoader: the samples and the collate)."""
        iterator = iter(DataLoader(self.dataset, batch_size=self.batch_size))
        samples = []
        for _ in range(count):
            started = time.perf_counter()
            next(iterator)
            samples.append(time.perf_counter() - started)
        return samples

    def describe(self) -> str:
        return (f"one epoch of {self.batches:,} batches of {self.batch_size} samples (shuffled, num_workers=0), each "
                f"sample {self.dataset.cost_s * 1e6:.0f} µs of CPU to make; MLP {'-'.join(map(str, SIZES))}, "
                f"cross-entropy, SGD")


def step_of(point: int, batches: int) -> int:
    return point * batches // 100


# ---------------------------------------------------------------------------------------------------- probe
@dataclass
class FirstStep:
    """A resumed run's first training step: when it started (seconds after the call that resumed), the optimizer
    steps done before it, its batch's sample indices, the samples loaded since the call, the warnings raised."""

    seconds: float
    step: int
    indices: list[int]
    loads: int
    warnings: list[str] = field(default_factory=list)


class Probe:
    """Called by each framework's hook at the start of every training step, with the steps done before it and the
    batch's sample indices; returns True when the run should stop after that step. Recording a reference run
    (`stop_after` steps), it keeps every batch's indices; timing a resume, it reads the clock at the first step."""

    def __init__(self, dataset: CostlyDataset, stop_after: int | None = None,
                 profiler: cProfile.Profile | None = None) -> None:
        self.dataset = dataset
        self.stop_after = stop_after
        self.profiler = profiler  # profiles the timed span, if given
        self.batches: list[list[int]] = []
        self.first: FirstStep | None = None
        self._started = 0.0
        self._loads = 0

    def start(self) -> None:
        gc.collect()
        self._loads = self.dataset.loads
        if self.profiler is not None:
            self.profiler.enable()
        self._started = time.perf_counter()

    def step_starts(self, steps_done: int, indices: torch.Tensor) -> bool:
        if self.stop_after is None:
            now = time.perf_counter()
            if self.profiler is not None:
                self.profiler.disable()
            self.first = FirstStep(now - self._started, steps_done, indices.tolist(),
                                   self.dataset.loads - self._loads)
            return True
        self.batches.append(indices.tolist())
        return steps_done + 1 >= self.stop_after


# ------------------------------------------------------------------------------------------------- frameworks
# A runner trains (or resumes) once: runner(workload, probe, checkpoint directory, run directory, steps between
# checkpoints, checkpoint to resume or None). It builds everything, then calls probe.start() right before the call
# that resumes; its hook calls probe.step_starts and stops the run when told to.
Runner = Callable[[Workload, Probe, str, str, int, "str | None"], None]


class Classifier(LoopModule):
    """tracktrain's module: cross-entropy on the MLP, SGD (line for line the same as Ignite's step and Lightning's
    module below)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def train_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, _ = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=LEARNING_RATE)


def run_tracktrain(workload: Workload, probe: Probe, ckpt_dir: str, run_dir: str, every: int,
                   ckpt_path: str | None) -> None:
    trainer = Trainer(max_epochs=1, seed=workload.seed, loggers=False, enable_progress_bar=False,
                      default_root_dir=run_dir,
                      callbacks=[ModelCheckpoint(dirpath=ckpt_dir, save_top_k=None, every_n_train_steps=every)])

    def step_started(engine: Any) -> None:
        if probe.step_starts(trainer.global_step, engine.state.batch[2]):
            trainer.stop()

    trainer.train_engine.add_event_handler(Events.ITERATION_STARTED, step_started)
    module, loader = Classifier(workload.net()), workload.loader()
    probe.start()
    trainer.fit(module, loader, ckpt_path=ckpt_path)


def tracktrain_checkpoint(ckpt_dir: str, step: int) -> str:
    return os.path.join(ckpt_dir, f"checkpoint_{step}.pt")


def ignite_runner(ignite: Any) -> Runner:
    DeterministicEngine, IgniteEvents = ignite.engine.DeterministicEngine, ignite.engine.Events
    Checkpoint, DiskSaver = ignite.handlers.Checkpoint, ignite.handlers.DiskSaver

    def run(workload: Workload, probe: Probe, ckpt_dir: str, run_dir: str, every: int, ckpt_path: str | None) -> None:
        # Ignite's recipe: the same seed at the start of the first run and of a resumed one (DeterministicEngine
        # draws its run's seed from torch's generator when the run starts; the seed is not in its state_dict)
        ignite.utils.manual_seed(workload.seed)
        net = workload.net()
        optimizer = torch.optim.SGD(net.parameters(), lr=LEARNING_RATE)

        def train_step(engine: Any, batch: Any) -> torch.Tensor:
            net.train()
            optimizer.zero_grad()
            x, y, _ = batch
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            optimizer.step()
            return loss.detach()

        engine = DeterministicEngine(train_step)
        objects = {"model": net, "optimizer": optimizer, "engine": engine}
        saver = Checkpoint(objects, DiskSaver(ckpt_dir, require_empty=False), n_saved=None,
                           global_step_transform=lambda engine, _: engine.state.iteration)
        engine.add_event_handler(IgniteEvents.ITERATION_COMPLETED(every=every), saver)

        def step_started(engine: Any) -> None:
            if probe.step_starts(engine.state.iteration - 1, engine.state.batch[2]):
                engine.terminate()

        engine.add_event_handler(IgniteEvents.ITERATION_STARTED, step_started)
        loader = workload.loader()
        probe.start()
        if ckpt_path is None:
            engine.run(loader, max_epochs=1)
            return
        # weights_only=False: the engine's state holds numpy's generator state, which torch.load's default (since
        # torch 2.6) refuses, and so does Checkpoint.load_objects(objects, <path>)
        Checkpoint.load_objects(objects, torch.load(ckpt_path, weights_only=False))
        engine.run(loader)

    return run


def ignite_checkpoint(ckpt_dir: str, step: int) -> str:
    return os.path.join(ckpt_dir, f"checkpoint_{step}.pt")


def lightning_runner(lightning: Any, stateful: bool) -> Runner:
    pl = lightning.pytorch

    class LightningClassifier(pl.LightningModule):
        def __init__(self, net: nn.Module) -> None:
            super().__init__()
            self.net = net

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y, _ = batch
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=LEARNING_RATE)

    class StepProbe(pl.Callback):
        def __init__(self, probe: Probe) -> None:
            self.probe = probe

        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            if self.probe.step_starts(trainer.global_step, batch[2]):
                trainer.should_stop = True

    def run(workload: Workload, probe: Probe, ckpt_dir: str, run_dir: str, every: int, ckpt_path: str | None) -> None:
        pl.seed_everything(workload.seed, verbose=False)
        checkpoints = pl.callbacks.ModelCheckpoint(dirpath=ckpt_dir, filename="{step}", save_top_k=-1,
                                                   every_n_train_steps=every)
        trainer = pl.Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                             accelerator="cpu", devices=1, default_root_dir=run_dir,
                             callbacks=[checkpoints, StepProbe(probe)])
        module, loader = LightningClassifier(workload.net()), workload.loader(stateful)
        probe.start()
        trainer.fit(module, loader, ckpt_path=ckpt_path)

    return run


def lightning_checkpoint(ckpt_dir: str, step: int) -> str:
    return os.path.join(ckpt_dir, f"step={step}.ckpt")


# ------------------------------------------------------------------------------------------------------- bench
@dataclass
class Framework:
    key: str
    run: Runner
    checkpoint: Callable[[str, int], str]
    ckpt_dir: str = ""  # where its reference run saved, and where its resumed runs save (none does, in one step)
    run_dir: str = ""
    reference: list[list[int]] = field(default_factory=list)  # the reference run's batches, by step
    reference_s: float = 0.0


def verdict(first: FirstStep, step: int, reference: list[list[int]]) -> str:
    """How the first resumed batch compares with the reference run's: the batch it trained at `step` (exact), its
    first batch (the epoch's order replayed from its start), or neither."""
    if first.step != step:
        return WRONG_STEP
    if step < len(reference) and first.indices == reference[step]:
        return EXACT
    return REPLAYED if reference and first.indices == reference[0] else OTHER


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
                self.problems.append(f"{framework.key}: the reference run trained {len(probe.batches)} steps, "
                                     f"expected {last + 1}")
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
        print(f"\n### cProfile: {LABELS[framework.key]} resumed at {point} % ({first.seconds * 1e3:.1f} ms profiled)\n")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(top)

    def warm_up(self) -> None:
        """One untimed resume per framework: lazy imports and first calls of the loading paths."""
        for framework in self.frameworks:
            self.resume_once(framework, POINTS[1])
        self.workload.time_batch_loads(UNIT_BATCHES)

    def measure(self, repeats: int, rng: random.Random, progress: Callable[[str], None]) -> None:
        keys: list[tuple[str, int] | None] = [None]  # None: time the batch loads (the unit)
        keys += [(framework.key, point) for framework in self.frameworks for point in POINTS]
        by_key = {framework.key: framework for framework in self.frameworks}
        done = 0
        for repeat, key in interleaved(keys, repeats, rng):
            if key is None:
                self.unit_s += self.workload.time_batch_loads(UNIT_BATCHES)
            else:
                framework, point = by_key[key[0]], key[1]
                first = self.resume_once(framework, point)
                self.samples.setdefault(key, []).append(first)
                self.check(framework, point, first)
            done += 1
            if done % len(keys) == 0:
                progress(f"repeat {repeat + 1} of {repeats}")

    def check(self, framework: Framework, point: int, first: FirstStep) -> None:
        """tracktrain's resume must be exact and load no skipped sample; the peers' results are only reported."""
        if framework.key != TRACKTRAIN:
            return
        step = step_of(point, self.workload.batches)
        result = verdict(first, step, framework.reference)
        if result != EXACT:
            self.problems.append(f"tracktrain at {point} %: the resumed run's first batch is not the reference run's "
                                 f"batch at step {step}: {result} (it started at step {first.step})")
        if first.loads != self.workload.batch_size:
            self.problems.append(f"tracktrain at {point} %: {first.loads} samples were loaded before the first step, "
                                 f"expected one batch ({self.workload.batch_size}): skipped batches were loaded")


# ------------------------------------------------------------------------------------------------ summaries
def summarize(bench: Bench, stat: str) -> tuple[list[dict[str, Any]], float]:
    center = STATISTICS[stat]
    unit_ms = center(bench.unit_s) * 1e3
    rows = []
    for point in POINTS:
        step = step_of(point, bench.workload.batches)
        row: dict[str, Any] = {"point_percent": point, "step": step, "batch_load_ms": unit_ms, "frameworks": {}}
        for framework in bench.frameworks:
            firsts = bench.samples.get((framework.key, point), [])
            ms = [first.seconds * 1e3 for first in firsts]
            q1, q3 = quartiles(ms) if ms else (None, None)
            verdicts = sorted({verdict(first, step, framework.reference) for first in firsts})
            row["frameworks"][framework.key] = {
                "ms": center(ms) if ms else None,
                "iqr_ms": q3 - q1 if ms else None,
                "batches": center(ms) / unit_ms if ms else None,
                "verdicts": verdicts,
                "exact": verdicts == [EXACT],
                "loads": sorted({first.loads for first in firsts}),
                "warnings": list(dict.fromkeys(w for first in firsts for w in first.warnings)),
                "samples_ms": ms,
            }
        rows.append(row)
    return rows, unit_ms


def ratio(row: dict[str, Any], key: str) -> float | None:
    ours, theirs = row["frameworks"][TRACKTRAIN]["ms"], row["frameworks"].get(key, {}).get("ms")
    return ours / theirs if ours is not None and theirs else None


# -------------------------------------------------------------------------------------------------- reporting
def ms_cell(cell: dict[str, Any] | None) -> str:
    if cell is None or cell["ms"] is None:
        return "—"
    return f"{format_cell(cell['ms'], decimals=1)} ({format_cell(cell['batches'], decimals=1)})"


def resume_table(rows: list[dict[str, Any]], keys: list[str]) -> str:
    peers = [key for key in keys if key != TRACKTRAIN]
    lines = [["resume at", "step", "1 batch load ms", "loading the skipped batches ms"]
             + [f"{LABELS[key]} ms (batches)" for key in keys]
             + [f"tt / {SHORT[key]}" for key in peers] + [f"exact ({' / '.join(SHORT[key] for key in keys)})"]]
    for row in rows:
        point = f"{row['point_percent']} %" if row["point_percent"] else "fresh start"
        cells = row["frameworks"]
        lines.append(
            [point, f"{row['step']:,}", format_cell(row["batch_load_ms"], decimals=3),
             format_cell(row["step"] * row["batch_load_ms"], decimals=1)]
            + [ms_cell(cells.get(key)) for key in keys]
            + [format_cell(ratio(row, key), decimals=3) for key in peers]
            + [" / ".join(("yes" if cells[key]["exact"] else "no") if cells[key]["verdicts"] else "—"
                          for key in keys)]
        )
    return markdown_table(lines, "lrrr" + "r" * (len(keys) + len(peers)) + "l")


def report(bench: Bench, rows: list[dict[str, Any]], stat: str, notes: list[str]) -> None:
    keys = [framework.key for framework in bench.frameworks]
    print(f"\n## Resume: from the call that resumes to the first training step\n\n$ {command_line()}\n")
    print(resume_table(rows, keys) + "\n")
    print(f"ms: {stat} over the repeats of the time from the call that resumes (fit(..., ckpt_path=...); Ignite: "
          "torch.load + Checkpoint.load_objects + run) to the start of the first training step, its batch loaded; "
          "(batches): that time in batch loads. loading the skipped batches: what a resume that replays the epoch up "
          "to the checkpoint by loading it would spend on that alone (step × 1 batch load). fresh start: the same fit "
          "without a checkpoint. tt / X: tracktrain's time over X's. exact: the first resumed batch is the one the "
          "uninterrupted run trained at that step.")
    for framework in bench.frameworks:
        resumed = [row["frameworks"][framework.key] for row in rows if row["point_percent"]]
        verdicts = sorted({v for cell in resumed for v in cell["verdicts"]})
        loads = sorted({n for cell in resumed for n in cell["loads"]})
        said = list(dict.fromkeys(w for cell in resumed for w in cell["warnings"] if RESUME_WORDS.search(w)))
        print(f"- {LABELS[framework.key]}: first resumed batch: {', '.join(verdicts) or '—'}; samples loaded before "
              f"the first step: {', '.join(map(str, loads)) or '—'}"
              + (f"; it warned: {'; '.join(repr(w[:200]) for w in said)}" if said else "; no warning")
              + f". (Reference run: {framework.reference_s:.1f} s.)")
    for note in notes:
        print(f"- {note}")


# ------------------------------------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--quick", action="store_true", help="a 200-batch epoch and 2 repeats: a smoke test, not a measurement")
    add("--batches", type=int, help="batches in the epoch, a multiple of 10 (default 10000; --quick 200)")
    add("--batch-size", type=int, default=8, help="samples per batch (default 8)")
    add("--sample-us", type=float, default=50.0, help="CPU time to make one sample, µs (default 50)")
    add("--repeats", type=int, help="timed resumes per framework and point (default 15; --quick 2)")
    add("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    add("--stat", choices=sorted(STATISTICS), default="median",
        help="statistic reported (default median; p25 or min resist interference from other processes)")
    add("--no-lightning", action="store_true", help="leave Lightning out")
    add("--no-ignite", action="store_true", help="leave Ignite out")
    add("--profile", action="store_true", help="afterwards, cProfile one resume at 90 %% of each framework")
    add("--profile-top", type=int, default=25, help="functions listed per profile (default 25)")
    add("--root-dir", help="where checkpoints go, in a temporary directory made and removed there")
    add("--seed", type=int, default=0, help="seed of the weights, the data order and the shuffled repeats")
    add("--json", metavar="PATH", help="also write all results (with every sample) to PATH")
    args = parser.parse_args(argv)
    if args.batches is None:
        args.batches = 200 if args.quick else 10_000
    if args.repeats is None:
        args.repeats = 2 if args.quick else 15
    if args.batches < 20 or args.batches % 10:
        parser.error("--batches must be a multiple of 10, at least 20 (checkpoints every 10 % of the epoch, and a "
                     "resumed run's one step must not be a saving one)")
    for name in ("batch_size", "repeats", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if args.sample_us < 0:
        parser.error("--sample-us must not be negative")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")  # torchdata, on every iter()
    ignite, ignite_status = load_peer("ignite", "ignite.engine", "ignite.handlers", "ignite.utils",
                                      skip=args.no_ignite)
    lightning, lightning_status = load_peer("lightning", "lightning.pytorch", skip=args.no_lightning)
    torchdata, torchdata_status = load_peer("torchdata", "torchdata.stateful_dataloader", skip=lightning is None)
    notes = [f"{name}: {status}; its column is missing." for name, module, status in (
        ("ignite", ignite, ignite_status), ("lightning", lightning, lightning_status),
        ("torchdata", torchdata, torchdata_status)) if module is None and not (name == "torchdata" and not lightning)]
    workload = Workload(args.batches, args.batch_size, args.sample_us, args.seed)
    frameworks = [Framework(TRACKTRAIN, run_tracktrain, tracktrain_checkpoint)]
    if ignite is not None:
        frameworks.append(Framework(IGNITE, ignite_runner(ignite), ignite_checkpoint))
    if lightning is not None:
        frameworks.append(Framework(LIGHTNING, lightning_runner(lightning, stateful=False), lightning_checkpoint))
        if torchdata is not None:
            frameworks.append(Framework(LIGHTNING_SDL, lightning_runner(lightning, stateful=True),
                                        lightning_checkpoint))
    root_dir = tempfile.mkdtemp(prefix="tracktrain-bench-resume-", dir=args.root_dir)
    atexit.register(shutil.rmtree, root_dir, True)
    bench = Bench(workload, frameworks, root_dir)

    env = environment(args.threads, ignite=ignite_status, lightning=lightning_status, torchdata=torchdata_status)
    print_heading(
        "Resume time-to-first-step mid-epoch: tracktrain, Ignite DeterministicEngine, Lightning", env, args.threads,
        f"ignite {ignite_status}, lightning {lightning_status}, torchdata {torchdata_status}",
        f"{args.repeats} interleaved repeats", args.stat, args.quick,
    )
    print(f"{workload.describe()}; checkpoints every {bench.every:,} steps\n", flush=True)
    started = time.perf_counter()

    def progress(what: str) -> None:
        print(f"- {what} [{time.perf_counter() - started:.1f} s]", flush=True)

    bench.train_references(progress)
    bench.warm_up()
    # what lives until the end (the reference runs' batches among it) leaves the collector's sight: a full collection
    # that lands in a timed window then costs as little in one framework's run as in another's
    gc.collect()
    gc.freeze()
    progress("warm-up done")
    bench.measure(args.repeats, random.Random(args.seed), progress)
    rows, unit_ms = summarize(bench, args.stat)
    report(bench, rows, args.stat, notes)
    if args.profile:
        for framework in frameworks:
            bench.profile(framework, POINTS[-1], args.profile_top)
    if args.json:
        write_json(args.json, {
            "environment": env, "arguments": vars(args), "workload": workload.describe(),
            "frameworks": [framework.key for framework in frameworks], "batch_load_ms": unit_ms,
            "batch_load_samples_ms": [value * 1e3 for value in bench.unit_s],
            "reference_s": {framework.key: framework.reference_s for framework in frameworks},
            "rows": rows, "notes": notes, "problems": bench.problems,
        })
    return exit_status(bench.problems)


if __name__ == "__main__":
    sys.exit(main())
