"""What `bench_checkpoint.py` fits and checks: the step clock (a forward pre-hook and an optimizer step post-hook),
each framework's `ModelCheckpoint` with a clock read when a checkpoint is committed, the modules (cross-entropy, fused
AdamW), one fit of each framework, and the checks of what a fit wrote (complete, loadable, the same tensors)."""

from __future__ import annotations

import functools
import io
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from checkpoint_storage import Storage
from torch import nn
from workloads import ClassifierData, lightning_trainer, lightning_twin, mlp_name

from tracktrain import LoopModule
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.checkpoint.async_saver import AsyncSaver
from tracktrain.checkpoint.discovery import committed_checkpoints
from tracktrain.checkpoint.manifest import manifest_name, read_checked
from tracktrain.trainer import Trainer

TRACKTRAIN, LIGHTNING = "tracktrain", "lightning"
LEARNING_RATE = 1e-3


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


class ClassifierCode:
    """The module of both frameworks (Lightning's is `lightning_twin` of it): cross-entropy on the MLP, fused
    AdamW."""

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


class Classifier(ClassifierCode, LoopModule):
    """tracktrain's module."""


@functools.cache
def lightning_classes(lightning: Any) -> tuple[type, type]:
    """Lightning's module, the same code as `Classifier`, and its `ModelCheckpoint` with a clock read when each
    (blocking) save returns."""
    LightningClassifier = lightning_twin(ClassifierCode, lightning)

    class TimedModelCheckpoint(lightning.pytorch.callbacks.ModelCheckpoint):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.commits: list[tuple[str, float]] = []

        def _save_checkpoint(self, trainer: Any, filepath: str) -> None:
            super()._save_checkpoint(trainer, filepath)
            self.commits.append((filepath, time.perf_counter()))

    return LightningClassifier, TimedModelCheckpoint


# ------------------------------------------------------------------------------------------------------ setup
class Workload(ClassifierData):
    """The MLP's initial weights and one DataLoader over synthetic in-memory tensors, shared by every fit: each
    fit trains a fresh copy of the same weights on the same batches in the same order, so every checkpoint of step
    s holds the same values whichever variant wrote it."""

    @property
    def state_mb(self) -> float:
        return 3 * 4 * self.parameters / 1e6  # fp32 weights and AdamW's two moments

    def describe(self) -> str:
        return (
            f"{mlp_name(self.sizes)} ({self.parameters / 1e6:.2f} M parameters), cross-entropy, "
            f"AdamW(fused=True), batch {self.batch_size}: {self.state_mb:.1f} MB of weights and moments"
        )


@dataclass
class Fit:
    """One fit's readings. `commits`: (path, clock) per committed checkpoint, in commit order."""

    clock: StepClock
    global_step: int
    commits: list[tuple[str, float]] = field(default_factory=list)
    started: float = 0.0
    first_weights: dict[str, torch.Tensor] | None = None


def fit_tracktrain(
    workload: Workload,
    max_steps: int,
    run_dir: str,
    directory: str | None,
    every: int,
    async_save: bool = True,
    ckpt_path: str | None = None,
    lightning: Any = None,
) -> Fit:
    """tracktrain's Trainer (Lightning's, given `lightning`: no logger, bar or summary) with its ModelCheckpoint every
    `every` steps into `directory` (None: no checkpoints; `async_save` has no Lightning counterpart)."""
    net = workload.fresh_net()
    clock = StepClock(net)
    fit = Fit(clock, 0)
    if ckpt_path is not None:
        clock.on_first_forward = lambda net: setattr(fit, "first_weights", _clone(net.state_dict()))
    settings = {"max_steps": max_steps, "enable_checkpointing": directory is not None, "default_root_dir": run_dir}
    if lightning is None:
        saving = {"save_top_k": None, "async_save": async_save}
        module_class, checkpoint_class = Classifier, TimedModelCheckpoint
    else:
        saving = {"save_top_k": -1}
        module_class, checkpoint_class = lightning_classes(lightning)
    callbacks = [] if directory is None else [checkpoint_class(dirpath=directory, every_n_train_steps=every, **saving)]
    fit.started = time.perf_counter()
    if lightning is None:
        trainer = Trainer(callbacks=callbacks, enable_progress_bar=False, loggers=False, accelerator="cpu", **settings)
    else:
        trainer = lightning_trainer(lightning, callbacks=callbacks, **settings)
    trainer.fit(module_class(net, clock), workload.loader, ckpt_path=ckpt_path)
    fit.global_step = trainer.global_step
    fit.commits = callbacks[0].commits if callbacks else []
    return fit


def lightning_fitter(lightning: Any) -> Callable[..., Fit]:
    return functools.partial(fit_tracktrain, lightning=lightning)


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


def bit_identical(tensors: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(tensors[name], value) for name, value in reference.items())


def verify_tracktrain_dir(
    storage: Storage, directory: str, steps: list[int], where: str, problems: list[str]
) -> dict[int, tuple[str, dict[str, Any]]]:
    """Every checkpoint tracktrain wrote into `directory` is committed (manifest), matches its manifest's size and
    SHA-256, loads with torch.load(weights_only=True), and is the one of its step, and no other file is left there
    (a data file without manifest, a temporary file); returns step -> (url, checkpoint)."""
    found, incomplete = committed_checkpoints(directory)
    problems += [f"{where}: incomplete checkpoint: {problem}" for problem in incomplete]
    committed = {
        name for checkpoint in found for name in (checkpoint.data_filename, manifest_name(checkpoint.data_filename))
    }
    stray = sorted(set(storage.files(directory)) - committed)
    if stray:
        problems.append(f"{where}: files that belong to no committed checkpoint: {stray}")
    loaded: dict[int, tuple[str, dict[str, Any]]] = {}
    for checkpoint in found:
        step = int(checkpoint.summary.get("global_step", -1))
        try:
            data, check, _ = read_checked(checkpoint.url)
            check()  # its manifest exists: committed_checkpoints lists no other
            state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as error:
            problems.append(f"{where}: checkpoint {checkpoint.url} does not load: {type(error).__name__}: {error}")
            continue
        if state["trainer"]["global_step"] != step:
            problems.append(
                f"{where}: {checkpoint.url}: its manifest says step {step}, its content "
                f"{state['trainer']['global_step']}"
            )
        loaded[step] = checkpoint.url, state
    if sorted(loaded) != steps:
        problems.append(f"{where}: checkpoints of steps {sorted(loaded)} were written and load, expected {steps}")
    return loaded


def verify_lightning_dir(
    storage: Storage, directory: str, steps: list[int], where: str, problems: list[str]
) -> dict[int, tuple[str, dict[str, Any]]]:
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
