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
import functools
import gc
import importlib.util
import io
import os
import random
import select
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from _common import (
    STATISTICS, environment, exit_status, format_cell, make_mlp, print_heading, quartiles, silence_lightning,
    write_json,
)
from tracktrain import LoopModule
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.handlers.async_saver import AsyncSaver
from tracktrain.handlers.manifest import committed_checkpoints, manifest_name, read_checked
from tracktrain.trainer import Trainer
from tracktrain_integrations.testing import free_port

LOCAL, S3 = "local", "s3"
TT_ASYNC, TT_BLOCKING, LIGHTNING = "tracktrain async", "tracktrain blocking", "lightning"
TRACKTRAIN = "tracktrain"
SAVING_VARIANTS = (TT_ASYNC, TT_BLOCKING, LIGHTNING)
# how each variant is configured, for the table and the JSON file
DESCRIPTIONS = {
    TT_ASYNC: "tracktrain ModelCheckpoint(async_save=True)",
    TT_BLOCKING: "tracktrain ModelCheckpoint(async_save=False)",
    LIGHTNING: "Lightning ModelCheckpoint (torch.save, blocking)",
}
LEARNING_RATE = 1e-3
FULL_SIZES, QUICK_SIZES = (1024, 2048, 2048, 1024, 10), (256, 512, 512, 10)  # ~100.8 MB and ~4.8 MB of state


# ------------------------------------------------------------------------------------------------------ clocks
class StepClock:
    """The clock at the start of every step (a forward pre-hook on the network) and at the end of every step (a
    step post-hook on the optimizer). `on_first_forward`, if set, runs once, after the first reading."""

    def __init__(self, net: nn.Module) -> None:
        self.forward_starts: list[float] = []
        self.step_ends: list[float] = []
        self.on_first_forward: Callable[[nn.Module], None] | None = None
        net.register_forward_pre_hook(self._forward_started)

    def watch(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.register_step_post_hook(self._step_ended)

    def _forward_started(self, module: nn.Module, inputs: Any) -> None:
        self.forward_starts.append(time.perf_counter())
        if self.on_first_forward is not None:
            first, self.on_first_forward = self.on_first_forward, None
            first(module)  # after the reading: its cost is not timed

    def _step_ended(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.step_ends.append(time.perf_counter())


class TimedModelCheckpoint(ModelCheckpoint):
    """tracktrain's `ModelCheckpoint` with a clock read when each checkpoint is committed (its file and manifest
    written): `_after_commit` runs right after a blocking save returns, and for an async save queues its work
    behind the save on the writer thread, which is where the reading is taken."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commits: list[tuple[str, float]] = []

    def _after_commit(self, trainer: Any, path: str) -> None:
        def committed() -> None:
            self.commits.append((path, time.perf_counter()))

        if isinstance(self._saver, AsyncSaver):
            self._saver.then(committed)
        else:
            committed()
        super()._after_commit(trainer, path)


class Classifier(LoopModule):
    """tracktrain's module: cross-entropy on the MLP, fused AdamW (the same arithmetic as Lightning's module)."""

    def __init__(self, net: nn.Module, clock: StepClock) -> None:
        super().__init__()
        self.net = net
        self.clock = clock

    def train_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        optimizer = torch.optim.AdamW(self.parameters(), lr=LEARNING_RATE, fused=True)
        self.clock.watch(optimizer)
        return optimizer


def lightning_classes(lightning: Any) -> tuple[type, type]:
    """Lightning's module, line for line the same as `Classifier`, and its `ModelCheckpoint` with a clock read
    when each (blocking) save returns."""

    class LightningClassifier(lightning.LightningModule):
        def __init__(self, net: nn.Module, clock: StepClock) -> None:
            super().__init__()
            self.net = net
            self.clock = clock

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            optimizer = torch.optim.AdamW(self.parameters(), lr=LEARNING_RATE, fused=True)
            self.clock.watch(optimizer)
            return optimizer

    class TimedModelCheckpoint(lightning.pytorch.callbacks.ModelCheckpoint):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.commits: list[tuple[str, float]] = []

        def _save_checkpoint(self, trainer: Any, filepath: str) -> None:
            super()._save_checkpoint(trainer, filepath)
            self.commits.append((filepath, time.perf_counter()))

    return LightningClassifier, TimedModelCheckpoint


def load_lightning() -> tuple[Any, str]:
    try:
        import lightning
        import lightning.pytorch.callbacks  # noqa: F401 (ModelCheckpoint)
    except Exception as error:  # not installed, or an install that fails to import
        return None, f"not installed ({type(error).__name__}: {error})"
    silence_lightning()
    return lightning, lightning.__version__


# ----------------------------------------------------------------------------------------------------- storage
class MotoServer:
    """moto's `ThreadedMotoServer` on 127.0.0.1 in a child process of its own (so its request handling never holds
    this process's GIL, as a real S3 would not), stopped by the PID started here. `environment` points boto / s3fs
    at it with fake credentials."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> None:
        code = (
            "import sys\nfrom moto.server import ThreadedMotoServer\n"
            f"server = ThreadedMotoServer(ip_address='127.0.0.1', port={self.port}, verbose=False)\n"
            "server.start()\nprint('ready', flush=True)\nsys.stdin.read()  # until the parent closes it\n"
            "server.stop()\n"
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if ready else b""  # type: ignore[union-attr]
        if line.strip() != b"ready":
            self.stop()
            raise RuntimeError(f"moto server did not start within {timeout} s (it printed {line!r})")

    def cpu_seconds(self) -> float | None:
        """The CPU time the server's process has used so far (Linux: /proc), None where it cannot be read."""
        if self.process is None:
            return None
        try:
            with open(f"/proc/{self.process.pid}/stat", encoding="ascii") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime, all its threads

    @property
    def environment(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1"}

    def stop(self, timeout: float = 15.0) -> None:
        if self.process is None:
            return
        process, self.process = self.process, None
        try:
            process.stdin.close()  # type: ignore[union-attr]
            process.wait(timeout)
        except (OSError, subprocess.TimeoutExpired):
            try:
                os.killpg(process.pid, signal.SIGKILL)  # the group of the PID started above
            except ProcessLookupError:
                pass
            process.wait(timeout)


class Storage:
    """Where the fits write: run directories under a local temporary directory, or under a bucket on moto.
    `server_cpu()`: the CPU seconds the storage's server has used so far (None: no server of ours)."""

    def __init__(self, key: str, root: str, server_cpu: Callable[[], float | None] = lambda: None) -> None:
        self.key = key
        self.root = root  # a local directory or "s3://bucket"
        self.server_cpu = server_cpu
        import fsspec

        self.fs = fsspec.filesystem("s3") if key == S3 else fsspec.filesystem("file")

    def new_dir(self) -> str:
        name = f"run-{uuid.uuid4().hex[:10]}"
        return f"{self.root}/{name}" if self.key == S3 else os.path.join(self.root, name)

    def files(self, directory: str) -> dict[str, int]:
        """Name -> size of the files directly in `directory`."""
        self.fs.invalidate_cache()
        try:
            entries = self.fs.ls(directory, detail=True)
        except FileNotFoundError:
            return {}
        return {entry["name"].rstrip("/").rsplit("/", 1)[-1]: int(entry.get("size") or 0)
                for entry in entries if entry["type"] == "file"}

    def read(self, url: str) -> bytes:
        return self.fs.cat_file(url)

    def join(self, directory: str, name: str) -> str:
        return f"{directory}/{name}" if self.key == S3 else os.path.join(directory, name)

    def remove(self, directory: str) -> None:
        self.fs.invalidate_cache()
        try:
            self.fs.rm(directory, recursive=True)
        except FileNotFoundError:
            pass


# ------------------------------------------------------------------------------------------------------ setup
class Workload:
    """The MLP's initial weights and one DataLoader over synthetic in-memory tensors, shared by every fit: each
    fit trains a fresh copy of the same weights on the same batches in the same order, so every checkpoint of step
    s holds the same values whichever variant wrote it."""

    def __init__(self, sizes: tuple[int, ...], batch_size: int, batches: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        inputs = torch.randn(batch_size * batches, sizes[0], generator=generator)
        targets = torch.randint(0, sizes[-1], (batch_size * batches,), generator=generator)
        self.sizes = sizes
        self.batch_size = batch_size
        self.loader = DataLoader(TensorDataset(inputs, targets), batch_size=batch_size)
        torch.manual_seed(seed)
        self._initial = {name: value.clone() for name, value in make_mlp(sizes).state_dict().items()}
        self.parameters = sum(value.numel() for value in self._initial.values())
        self.state_mb = 3 * 4 * self.parameters / 1e6  # fp32 weights and AdamW's two moments

    def fresh_net(self) -> nn.Sequential:
        net = make_mlp(self.sizes)
        net.load_state_dict(self._initial)
        return net

    def describe(self) -> str:
        return (f"MLP {'-'.join(map(str, self.sizes))} ({self.parameters / 1e6:.2f} M parameters), cross-entropy, "
                f"AdamW(fused=True), batch {self.batch_size}: {self.state_mb:.1f} MB of weights and moments")


@dataclass
class Fit:
    """One fit's readings. `commits`: (path, clock) per committed checkpoint, in commit order."""

    clock: StepClock
    global_step: int
    commits: list[tuple[str, float]] = field(default_factory=list)
    started: float = 0.0
    first_weights: dict[str, torch.Tensor] | None = None


def fit_tracktrain(workload: Workload, max_steps: int, run_dir: str, directory: str | None, every: int,
                   async_save: bool = True, ckpt_path: str | None = None) -> Fit:
    """tracktrain's Trainer with a ModelCheckpoint every `every` steps into `directory` (None: no checkpoints)."""
    net = workload.fresh_net()
    clock = StepClock(net)
    fit = Fit(clock, 0)
    if ckpt_path is not None:
        clock.on_first_forward = lambda net: setattr(fit, "first_weights", _clone(net.state_dict()))
    callbacks = [] if directory is None else [
        TimedModelCheckpoint(dirpath=directory, save_top_k=None, every_n_train_steps=every, async_save=async_save)]
    fit.started = time.perf_counter()
    trainer = Trainer(
        max_steps=max_steps, enable_progress_bar=False, enable_checkpointing=directory is not None,
        callbacks=callbacks, loggers=False, default_root_dir=run_dir, accelerator="cpu",
    )
    trainer.fit(Classifier(net, clock), workload.loader, ckpt_path=ckpt_path)
    fit.global_step = trainer.global_step
    fit.commits = callbacks[0].commits if callbacks else []
    return fit


def lightning_fitter(lightning: Any) -> Callable[..., Fit]:
    module_class, checkpoint_class = lightning_classes(lightning)

    def fit_lightning(workload: Workload, max_steps: int, run_dir: str, directory: str | None, every: int,
                      async_save: bool = True, ckpt_path: str | None = None) -> Fit:
        """Lightning's Trainer with its ModelCheckpoint every `every` steps into `directory` (None: none); no
        logger, bar or summary (`async_save` has no Lightning counterpart and is ignored)."""
        net = workload.fresh_net()
        clock = StepClock(net)
        fit = Fit(clock, 0)
        if ckpt_path is not None:
            clock.on_first_forward = lambda net: setattr(fit, "first_weights", _clone(net.state_dict()))
        callbacks = [] if directory is None else [
            checkpoint_class(dirpath=directory, save_top_k=-1, every_n_train_steps=every)]
        fit.started = time.perf_counter()
        trainer = lightning.Trainer(
            max_steps=max_steps, enable_progress_bar=False, logger=False, enable_model_summary=False,
            enable_checkpointing=directory is not None, callbacks=callbacks, accelerator="cpu", devices=1,
            num_sanity_val_steps=0, default_root_dir=run_dir,
        )
        trainer.fit(module_class(net, clock), train_dataloaders=workload.loader, ckpt_path=ckpt_path)
        fit.global_step = trainer.global_step
        fit.commits = callbacks[0].commits if callbacks else []
        return fit

    return fit_lightning


def _clone(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in state.items()}


# ------------------------------------------------------------------------------------------- checkpoint checks
def checkpoint_tensors(checkpoint: dict[str, Any], library: str) -> dict[str, torch.Tensor]:
    """The network's weights and the optimizer's per-parameter state, under names both libraries share."""
    if library == TRACKTRAIN:
        model, optimizer = checkpoint["model"], checkpoint["optimizers"][0]
    else:
        model, optimizer = checkpoint["state_dict"], checkpoint["optimizer_states"][0]
    tensors = {f"model/{name}": value for name, value in model.items()}
    for index, state in optimizer["state"].items():
        for name, value in state.items():
            tensors[f"optimizer/{index}/{name}"] = torch.as_tensor(value)
    return tensors


def compare(tensors: dict[str, torch.Tensor], reference: dict[str, torch.Tensor], exact: bool) -> str | None:
    """None when `tensors` match `reference` (bit for bit when `exact`, else within rtol=1e-5); else what differs."""
    if sorted(tensors) != sorted(reference):
        return f"different entries: {sorted(set(tensors) ^ set(reference))[:4]}"
    for name, value in reference.items():
        other = tensors[name]
        if other.shape != value.shape:
            return f"{name}: shape {tuple(other.shape)} instead of {tuple(value.shape)}"
        same = torch.equal(other, value) if exact else torch.allclose(other.float(), value.float(), rtol=1e-5,
                                                                        atol=1e-8)
        if not same:
            return f"{name}: largest difference {(other.float() - value.float()).abs().max().item():.3g}"
    return None


def bit_identical(tensors: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(tensors[name], value) for name, value in reference.items())


def verify_tracktrain_dir(storage: Storage, directory: str, steps: list[int], where: str,
                          problems: list[str]) -> dict[int, tuple[str, dict[str, Any]]]:
    """Every checkpoint tracktrain wrote into `directory` is committed (manifest), matches its manifest's size and
    SHA-256, loads with torch.load(weights_only=True), and is the one of its step, and no other file is left there
    (a data file without manifest, a temporary file); returns step -> (url, checkpoint)."""
    found, incomplete = committed_checkpoints(directory)
    problems += [f"{where}: incomplete checkpoint: {problem}" for problem in incomplete]
    committed = {name for checkpoint in found for name in (checkpoint.data_filename, manifest_name(
        checkpoint.data_filename))}
    stray = sorted(set(storage.files(directory)) - committed)
    if stray:
        problems.append(f"{where}: files that belong to no committed checkpoint: {stray}")
    loaded: dict[int, tuple[str, dict[str, Any]]] = {}
    for checkpoint in found:
        step = int(checkpoint.summary.get("global_step", -1))
        try:
            data, check = read_checked(checkpoint.url)
            check()  # its manifest exists: committed_checkpoints lists no other
            state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as error:
            problems.append(f"{where}: checkpoint {checkpoint.url} does not load: {type(error).__name__}: {error}")
            continue
        if state["trainer"]["global_step"] != step:
            problems.append(f"{where}: {checkpoint.url}: its manifest says step {step}, its content "
                            f"{state['trainer']['global_step']}")
        loaded[step] = checkpoint.url, state
    if sorted(loaded) != steps:
        problems.append(f"{where}: checkpoints of steps {sorted(loaded)} were written and load, expected {steps}")
    return loaded


def verify_lightning_dir(storage: Storage, directory: str, steps: list[int], where: str,
                         problems: list[str]) -> dict[int, tuple[str, dict[str, Any]]]:
    """Every `.ckpt` Lightning wrote into `directory` loads and holds the network and optimizer state of its step;
    returns step -> (url, checkpoint)."""
    loaded: dict[int, tuple[str, dict[str, Any]]] = {}
    for name in sorted(storage.files(directory)):
        if not name.endswith(".ckpt"):
            continue
        url = storage.join(directory, name)
        try:
            state = torch.load(io.BytesIO(storage.read(url)), map_location="cpu", weights_only=False)
            checkpoint_tensors(state, LIGHTNING)
        except Exception as error:
            problems.append(f"{where}: checkpoint {url} does not load: {type(error).__name__}: {error}")
            continue
        loaded[int(state["global_step"])] = url, state
    if sorted(loaded) != steps:
        problems.append(f"{where}: checkpoints of steps {sorted(loaded)} were written and load, expected {steps}")
    return loaded


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
        samples.append(SaveSample(gap - baseline.gap, window - every * baseline.period,
                                  commit_times[k] - ends[step - 1], waited))
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

    def __init__(self, workload: Workload, settings: Settings, fitters: dict[str, Callable[..., Fit]],
                 storages: list[Storage], root_dir: str, rng: random.Random) -> None:
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
        self.cases = {(storage.key, variant): Case(storage, variant, _library(variant))
                      for storage in storages for variant in SAVING_VARIANTS if _library(variant) in fitters}

    # ------------------------------------------------------------------------------------------------- fits
    def run(self, library: str, max_steps: int, directory: str | None, every: int, async_save: bool = True,
            ckpt_path: str | None = None) -> Fit:
        run_dir = tempfile.mkdtemp(prefix="run-", dir=self.root_dir)
        try:
            torch.set_num_threads(self.settings.threads)  # in case a library changed it
            gc.collect()
            return self.fitters[library](self.workload, max_steps, run_dir, directory, every, async_save, ckpt_path)
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)

    def saving_fit(self, case: Case, timed: bool = True, keep: bool = False, saves: int | None = None,
                   every: int | None = None) -> None:
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
                self.problems.append(f"{where}: its checkpoint of step {newest} differs from the first {case.library} "
                                     f"checkpoint of that step: {difference}")
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
        for repeat in range(self.settings.repeats):
            order = list(self.cases.values())
            self.rng.shuffle(order)  # slow drifts of the machine hit every variant alike
            for case in order:
                self.saving_fit(case, keep=repeat == 0 and case.variant in (TT_ASYNC, LIGHTNING))
            on_repeat(repeat)

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
                order = list(variants)
                self.rng.shuffle(order)
                for library, how, ckpt_path in order:
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
                        self.problems.append(f"{where}: ended at step {fit.global_step} after "
                                             f"{len(fit.clock.step_ends)} step(s), expected {max_steps} after 1")
                    reference = self.references.get((library, newest))
                    if ckpt_path and reference is not None and fit.first_weights is not None:
                        model = {name: value for name, value in reference.items() if name.startswith("model/")}
                        weights = {f"model/net.{name}": value for name, value in fit.first_weights.items()}
                        difference = compare(weights, model, exact=library == TRACKTRAIN)
                        if difference is not None:
                            self.problems.append(f"{where}: the first step did not start from the checkpoint's "
                                                 f"weights: {difference}")
                    samples[(library, how)].append(fit.clock.forward_starts[0] - fit.started)
            for (library, how), values in samples.items():
                rows.append({"storage": storage.key, "library": library, "how": how, "samples_s": values,
                             "error": errors.get((library, how))})
        return rows

    def release(self) -> None:
        for (storage_key, _), (directory, _) in self.kept.items():
            next(storage for storage in self.storages if storage.key == storage_key).remove(directory)
        self.kept.clear()


def _library(variant: str) -> str:
    return LIGHTNING if variant == LIGHTNING else TRACKTRAIN


# ------------------------------------------------------------------------------------------------ summaries
def summarize_case(case: Case, settings: Settings, stat: str) -> dict[str, Any]:
    center = STATISTICS[stat]
    ms = {name: [getattr(sample, name) * 1e3 for sample in case.samples] for name in ("stall", "added",
                                                                                     "committed_after")}
    row: dict[str, Any] = {
        "storage": case.storage.key,
        "variant": case.variant,
        "description": DESCRIPTIONS[case.variant],
        "every_n_train_steps": settings.every[case.storage.key],
        "error": case.error,
        "checkpoints": len(case.samples),
        "checkpoint_mb": statistics.median(case.checkpoint_bytes) / 1e6 if case.checkpoint_bytes else None,
        "waited_for_previous": sum(sample.waited for sample in case.samples),
        # CPU the storage server (moto, on the same cores) used per checkpoint, median over the fits
        "server_cpu_ms": statistics.median(case.server_cpu) * 1e3 if case.server_cpu else None,
        "samples_ms": ms,
    }
    for name, values in ms.items():
        row[f"{name}_ms"] = center(values) if values else None
        row[f"{name}_iqr_ms"] = (lambda q: q[1] - q[0])(quartiles(values)) if values else None
    return row


def summarize_resume(rows: list[dict[str, Any]], stat: str) -> list[dict[str, Any]]:
    center = STATISTICS[stat]
    scratch = {(row["storage"], row["library"]): center(row["samples_s"]) * 1e3
               for row in rows if row["how"] == "from scratch" and row["samples_s"]}
    for row in rows:
        row["ms"] = center(row["samples_s"]) * 1e3 if row["samples_s"] else None
        base = scratch.get((row["storage"], row["library"]))
        row["load_ms"] = row["ms"] - base if row["ms"] is not None and base is not None and row["how"] != \
            "from scratch" else None
    return rows


# ------------------------------------------------------------------------------------------------- reporting
fmt = functools.partial(format_cell, decimals=1)  # milliseconds


def table(lines: list[list[str]], align: str) -> str:
    """A markdown table: the first line is the header; `align` has one of l / r per column."""
    rule = "|" + "|".join(":---" if side == "l" else "---:" for side in align) + "|"
    rows = ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join([rows[0], rule] + rows[1:])


def stall_table(rows: list[dict[str, Any]]) -> str:
    lines = [[
        "storage", "variant", "every N steps", "checkpoints", "MB", "stall at the save ms", "(IQR)",
        "added per checkpoint ms", "(IQR)", "committed after ms", "stall × lightning's", "waited for the previous",
        "server CPU ms",
    ]]
    lightning = {row["storage"]: row["stall_ms"] for row in rows if row["variant"] == LIGHTNING}
    for row in rows:
        if row["error"] is not None:
            lines.append([row["storage"], row["description"], str(row["every_n_train_steps"]), "0", "—",
                          f"cannot save there: {row['error']}"] + ["—"] * 7)
            continue
        theirs = lightning.get(row["storage"])
        ratio = "—" if theirs is None or not theirs > 0 or row["stall_ms"] is None else \
            f"{row['stall_ms'] / theirs:.3f}"
        lines.append([
            row["storage"], row["description"], str(row["every_n_train_steps"]), str(row["checkpoints"]),
            fmt(row["checkpoint_mb"]), fmt(row["stall_ms"]), fmt(row["stall_iqr_ms"]), fmt(row["added_ms"]),
            fmt(row["added_iqr_ms"]), fmt(row["committed_after_ms"]), ratio,
            f"{row['waited_for_previous']} of {row['checkpoints']}", fmt(row["server_cpu_ms"]),
        ])
    return table(lines, "llrrrrrrrrrrr")


def resume_table(rows: list[dict[str, Any]]) -> str:
    lines = [["storage", "framework", "fit(..., ckpt_path=...)", "fits", "to the first step ms", "loading ms"]]
    for row in rows:
        failed = f"failed: {row['error']}" if row["error"] else "—"
        lines.append([row["storage"], row["library"], row["how"], str(len(row["samples_s"])),
                      fmt(row["ms"]) if row["ms"] is not None else failed,
                      fmt(row["load_ms"], True) if row["load_ms"] is not None else "—"])
    return table(lines, "lllrrr")


def report(rows: list[dict[str, Any]], resume_rows: list[dict[str, Any]], baselines: dict[str, list[Baseline]],
           lightning_identical: dict[int, bool], stat: str, lightning_status: str, notes: list[str]) -> None:
    print(f"\n## Stall per checkpoint\n\n$ {shlex.join([os.path.relpath(sys.executable)] + sys.argv)}\n")
    print(stall_table(rows) + "\n")
    libraries: dict[str, list[Baseline]] = {}
    for variant, values in baselines.items():
        libraries.setdefault(_library(variant), []).extend(values)
    steps = ", ".join(
        f"{library} {statistics.median(b.step for b in values) * 1e3:.1f} ms per step + "
        f"{statistics.median(b.gap for b in values) * 1e3:.2f} ms between steps"
        for library, values in libraries.items())
    print(
        f"ms: {stat} over all checkpoints of all repeats. stall at the save: the gap between the saving step's "
        "optimizer step and the next step's forward, minus the median gap between the steps of the same fit before "
        "its first checkpoint. added per checkpoint: the N steps from the saving one to the next save, minus N × "
        "the median step period before the first checkpoint (what a background write costs the steps that run "
        "beside it is in here). committed after: from the end of the saving step until the file (and tracktrain's "
        "manifest) is complete. waited for the previous: async saves that found the previous write still running "
        "(raise the steps between saves to avoid it). server CPU: what moto's server process used per checkpoint, "
        "on the same cores as the training (a real S3 spends none of this machine's CPU). "
        f"Before the first checkpoint: {steps}."
    )
    if lightning_identical:
        how = "bit for bit" if all(lightning_identical.values()) else "within rtol=1e-5, not all bit for bit"
        print(f"- Lightning's checkpoints of steps {sorted(lightning_identical)} hold the same weights and AdamW "
              f"moments as tracktrain's ({how}).")
    for note in notes:
        print(f"- {note}")
    print("\n## Resume: from the Trainer's construction to the first step's forward\n")
    print(resume_table(resume_rows) + "\n")
    print(f"ms: {stat} over the fits. loading: that fit − the same framework's fit from scratch (same callbacks, an "
          "empty directory). Each resumes from the newest checkpoint of the first repeat's fit.")


# ------------------------------------------------------------------------------------------------------ main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--quick", action="store_true", help="a ~5 MB state and small counts: a smoke test, not a measurement")
    add("--repeats", type=int, help="timed fits per variant and storage (default 3; --quick 1)")
    add("--saves", type=int, help="checkpoints per timed fit (default 3; --quick 2)")
    add("--every-local", type=int, help="steps between checkpoints on the local disk (default 20; --quick 6)")
    add("--every-s3", type=int, help="steps between checkpoints on S3 (default 50; --quick 6)")
    add("--resume-repeats", type=int, help="fits per resume variant (default 3; --quick 1)")
    add("--storages", default="local,s3", help="comma-separated: local, s3 (default both)")
    add("--batch-size", type=int, default=4, help="batch size (default 4: the step is mostly AdamW's update)")
    add("--threads", type=int, default=1, help="torch.set_num_threads for every fit (default 1)")
    add("--stat", choices=sorted(STATISTICS), default="median",
        help="statistic reported (default median; p25 or min resist interference from other processes)")
    add("--no-lightning", action="store_true", help="leave Lightning out")
    add("--root-dir", help="where the local checkpoints and run directories go, in a temporary directory made and "
        "removed there (default: the system's temporary directory); /dev/shm leaves the disk out")
    add("--seed", type=int, default=0, help="seed of the data, the weights and the shuffled orders")
    add("--json", metavar="PATH", help="also write all results (with every sample) to PATH")
    args = parser.parse_args(argv)
    defaults = {"repeats": (3, 1), "saves": (3, 2), "every_local": (20, 6), "every_s3": (50, 6),
                "resume_repeats": (3, 1)}
    for name, (full, small) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, small if args.quick else full)
    for name in ("repeats", "saves", "resume_repeats", "batch_size", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    for name in ("every_local", "every_s3"):
        if getattr(args, name) < LEAD_IN_SKIP + 3:
            parser.error(f"--{name.replace('_', '-')} must be at least {LEAD_IN_SKIP + 3} (the steps before the "
                         f"first save, but the first {LEAD_IN_SKIP}, are the baseline)")
    unknown = set(args.storages.split(",")) - {LOCAL, S3}
    if unknown:
        parser.error(f"--storages: unknown storage(s) {sorted(unknown)}; use local, s3")
    return args


def start_s3(moto: MotoServer) -> Storage:
    """Start moto, point boto / s3fs at it (this process only) and make a bucket."""
    moto.start()
    os.environ.update(moto.environment)
    import fsspec
    from s3fs import S3FileSystem

    S3FileSystem.clear_instance_cache()  # an instance made before would not know the endpoint
    bucket = f"tracktrain-bench-{uuid.uuid4().hex[:8]}"
    fsspec.filesystem("s3").mkdir(bucket)
    return Storage(S3, f"s3://{bucket}", moto.cpu_seconds)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    rng = random.Random(args.seed)
    lightning, lightning_status = (None, "left out (--no-lightning)") if args.no_lightning else load_lightning()
    notes = [] if lightning is not None else [f"lightning: {lightning_status}; its rows are missing."]
    wanted = args.storages.split(",")
    missing = [name for name in ("moto", "s3fs") if importlib.util.find_spec(name) is None]
    if S3 in wanted and missing:
        wanted.remove(S3)
        notes.append(f"s3: left out, {' and '.join(missing)} not installed (pip install 'moto[server]' s3fs).")
    settings = Settings(args.saves, {LOCAL: args.every_local, S3: args.every_s3}, args.repeats, args.resume_repeats,
                        args.threads)
    batches = max(settings.max_steps(key) for key in (LOCAL, S3)) + 2  # one epoch holds every fit
    workload = Workload(QUICK_SIZES if args.quick else FULL_SIZES, args.batch_size, batches, args.seed)
    root_dir = tempfile.mkdtemp(prefix="tracktrain-bench-checkpoint-", dir=args.root_dir)
    atexit.register(shutil.rmtree, root_dir, True)
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

    # everything built so far lives until the end: out of the collector's sight, so collections stay cheap
    gc.collect()
    gc.freeze()
    env = environment(args.threads, lightning=lightning_status)
    print_heading(
        "Checkpoint stall, commit and resume: tracktrain (async, blocking) and Lightning", env, args.threads,
        f"lightning {lightning_status}", f"{args.repeats} interleaved repeats of {args.saves} checkpoints",
        args.stat, args.quick,
    )
    where = {LOCAL: f"local disk under {root_dir}", S3: "S3 on a moto server (a child process on 127.0.0.1)"}
    print(f"{workload.describe()}; "
          + "; ".join(f"{where[storage.key]}, a checkpoint every {settings.every[storage.key]} steps"
                      for storage in storages) + "\n", flush=True)
    started = time.perf_counter()
    try:
        bench.warm_up()
        print(f"- warm-up done [{time.perf_counter() - started:.1f} s]", flush=True)
        bench.measure(lambda repeat: print(f"- repeat {repeat + 1} of {args.repeats} done "
                                           f"[{time.perf_counter() - started:.1f} s]", flush=True))
        resume_rows = summarize_resume(bench.measure_resume(), args.stat)
        print(f"- resume fits done [{time.perf_counter() - started:.1f} s]", flush=True)
    finally:
        bench.release()
        moto.stop()
    rows = [summarize_case(case, settings, args.stat) for case in bench.cases.values()]
    report(rows, resume_rows, bench.baselines, bench.lightning_identical, args.stat, lightning_status, notes)
    if args.json:
        write_json(args.json, {
            "environment": env, "arguments": vars(args), "workload": workload.describe(),
            "state_mb": workload.state_mb, "rows": rows, "resume": resume_rows,
            "baselines": {library: [vars(b) for b in values] for library, values in bench.baselines.items()},
            "lightning_bit_identical": {str(step): same for step, same in bench.lightning_identical.items()},
            "notes": notes, "problems": bench.problems,
        })
    return exit_status(bench.problems)


if __name__ == "__main__":
    sys.exit(main())
