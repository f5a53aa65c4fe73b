"""The frameworks `bench_resume.py` resumes: a long epoch whose samples cost CPU to make, the probe that reads the
first resumed step (its time, its batch's sample indices, the samples loaded before it), and one run of tracktrain,
Ignite's `DeterministicEngine` and Lightning (with a plain DataLoader or torchdata's `StatefulDataLoader`)."""

from __future__ import annotations

import cProfile
import gc
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset
from workloads import lightning_trainer, lightning_twin, make_mlp, mlp_name

from tracktrain import LoopModule
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.engine import Events
from tracktrain.trainer import Trainer

TRACKTRAIN, IGNITE, LIGHTNING, LIGHTNING_SDL = "tracktrain", "ignite", "lightning", "lightning+sdl"
SIZES = (32, 64, 10)
LEARNING_RATE = 0.01
# how a first resumed batch compares with the reference run's batches
EXACT, REPLAYED, OTHER, WRONG_STEP = "exact", "epoch replayed from its 1st batch", "another order", "wrong step"


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
        return (
            f"one epoch of {self.batches:,} batches of {self.batch_size} samples (shuffled, num_workers=0), each "
            f"sample {self.dataset.cost_s * 1e6:.0f} µs of CPU to make; {mlp_name(SIZES)}, "
            f"cross-entropy, SGD"
        )


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

    def __init__(
        self, dataset: CostlyDataset, stop_after: int | None = None, profiler: cProfile.Profile | None = None
    ) -> None:
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
            self.first = FirstStep(now - self._started, steps_done, indices.tolist(), self.dataset.loads - self._loads)
            return True
        self.batches.append(indices.tolist())
        return steps_done + 1 >= self.stop_after


# ------------------------------------------------------------------------------------------------- frameworks
# A runner trains (or resumes) once: runner(workload, probe, checkpoint directory, run directory, steps between
# checkpoints, checkpoint to resume or None). It builds everything, then calls probe.start() right before the call
# that resumes; its hook calls probe.step_starts and stops the run when told to.
Runner = Callable[[Workload, Probe, str, str, int, "str | None"], None]


class ClassifierCode:
    """The module of tracktrain and Lightning (`lightning_twin` of it): cross-entropy on the MLP, SGD (line for line
    Ignite's step below)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def train_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, _ = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=LEARNING_RATE)


class Classifier(ClassifierCode, LoopModule):
    """tracktrain's module."""


def run_tracktrain(
    workload: Workload, probe: Probe, ckpt_dir: str, run_dir: str, every: int, ckpt_path: str | None
) -> None:
    trainer = Trainer(
        max_epochs=1,
        seed=workload.seed,
        loggers=False,
        enable_progress_bar=False,
        default_root_dir=run_dir,
        callbacks=[ModelCheckpoint(dirpath=ckpt_dir, save_top_k=None, every_n_train_steps=every)],
    )

    def step_started(engine: Any) -> None:
        if probe.step_starts(trainer.global_step, engine.state.batch[2]):
            trainer.stop()

    trainer.train_engine.add_event_handler(Events.ITERATION_STARTED, step_started)
    module, loader = Classifier(workload.net()), workload.loader()
    probe.start()
    trainer.fit(module, loader, ckpt_path=ckpt_path)


def tracktrain_checkpoint(ckpt_dir: str, step: int) -> str:
    """Where tracktrain's (and Ignite's `DiskSaver`'s) checkpoint of `step` is."""
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
        saver = Checkpoint(
            objects,
            DiskSaver(ckpt_dir, require_empty=False),
            n_saved=None,
            global_step_transform=lambda engine, _: engine.state.iteration,
        )
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


def lightning_runner(lightning: Any, stateful: bool) -> Runner:
    pl = lightning.pytorch

    LightningClassifier = lightning_twin(ClassifierCode, lightning)

    class StepProbe(pl.Callback):
        def __init__(self, probe: Probe) -> None:
            self.probe = probe

        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            if self.probe.step_starts(trainer.global_step, batch[2]):
                trainer.should_stop = True

    def run(workload: Workload, probe: Probe, ckpt_dir: str, run_dir: str, every: int, ckpt_path: str | None) -> None:
        pl.seed_everything(workload.seed, verbose=False)
        checkpoints = pl.callbacks.ModelCheckpoint(
            dirpath=ckpt_dir, filename="{step}", save_top_k=-1, every_n_train_steps=every
        )
        trainer = lightning_trainer(
            lightning,
            max_epochs=1,
            enable_checkpointing=True,
            default_root_dir=run_dir,
            callbacks=[checkpoints, StepProbe(probe)],
        )
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
