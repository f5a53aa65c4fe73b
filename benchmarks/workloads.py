"""What the benchmarks train and next to whom: the MLPs, a classifier's data and its initial weights, the
`LoopModule` the Trainer benchmarks fit (and Lightning's line-for-line twin), the clock on a Trainer's train
engine, comparisons of trained weights, and loading the peer libraries (Ignite, Lightning, ...).

Imported as `workloads` by the scripts (benchmarks/ is first on sys.path); it imports torch, so the import-time
benchmark does not use it.
"""

from __future__ import annotations

import importlib
import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from tracktrain import LoopModule, Trainer

LEARNING_RATE = 0.01  # every variant's SGD, the hand-written loops' included


# ---------------------------------------------------------------------------------------------------- models
def make_mlp(sizes: tuple[int, ...]) -> nn.Sequential:
    """Linear layers of the given widths with ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for index, (width_in, width_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        if index:
            layers.append(nn.ReLU())
        layers.append(nn.Linear(width_in, width_out))
    return nn.Sequential(*layers)


def mlp_name(sizes: tuple[int, ...]) -> str:
    return f"MLP {'-'.join(map(str, sizes))}"


class ClassifierData:
    """A classifier's initial weights and one DataLoader over a synthetic in-memory TensorDataset (in order, no
    workers), the same in every process built with the same seed. Each fit trains a fresh copy of the same weights
    on the same batches, so every variant does exactly the same arithmetic."""

    def __init__(self, sizes: tuple[int, ...], batch_size: int, batches_per_epoch: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        samples = batch_size * batches_per_epoch
        inputs = torch.randn(samples, sizes[0], generator=generator)
        targets = torch.randint(0, sizes[-1], (samples,), generator=generator)
        self.sizes = sizes
        self.batch_size = batch_size
        self.batches_per_epoch = batches_per_epoch
        self.dataset = TensorDataset(inputs, targets)
        self.loader = DataLoader(self.dataset, batch_size=batch_size)
        torch.manual_seed(seed)
        self._initial = {name: value.clone() for name, value in make_mlp(sizes).state_dict().items()}
        self.parameters = sum(value.numel() for value in self._initial.values())

    def fresh_net(self) -> nn.Sequential:
        net = make_mlp(self.sizes)
        net.load_state_dict(self._initial)
        return net

    def describe(self) -> str:
        return (
            f"{mlp_name(self.sizes)}, cross-entropy, SGD, batch {self.batch_size}, DataLoader over a "
            f"TensorDataset, {self.batches_per_epoch} batches/epoch"
        )


def weights(net: nn.Module) -> list[torch.Tensor]:
    return [value.detach().clone() for value in net.state_dict().values()]


def max_difference(ours: list[torch.Tensor], reference: list[torch.Tensor]) -> float:
    return max(float((a - b).abs().max()) for a, b in zip(ours, reference))


def weights_match(
    ours: list[torch.Tensor], reference: list[torch.Tensor], rtol: float = 1e-5, atol: float = 1e-7
) -> bool:
    """Within the tolerance: bit for bit with one thread (the same arithmetic in the same order); the tolerance is
    for other thread counts and mixed precision."""
    return all(torch.allclose(a, b, rtol=rtol, atol=atol) for a, b in zip(ours, reference))


def state_difference(
    tensors: dict[str, torch.Tensor], reference: dict[str, torch.Tensor], exact: bool = True
) -> str | None:
    """None when `tensors` (name -> tensor) hold `reference`'s (bit for bit when `exact`, else within rtol=1e-5);
    else what differs."""
    if sorted(tensors) != sorted(reference):
        return f"different entries: {sorted(set(tensors) ^ set(reference))[:4]}"
    for name, value in reference.items():
        other = tensors[name]
        if other.shape != value.shape:
            return f"{name}: shape {tuple(other.shape)} instead of {tuple(value.shape)}"
        same = (
            torch.equal(other, value) if exact else torch.allclose(other.float(), value.float(), rtol=1e-5, atol=1e-8)
        )
        if not same:
            return f"{name}: largest difference {(other.float() - value.float()).abs().max().item():.3g}"
    return None


def bare_trainer(**settings: Any) -> Trainer:
    """tracktrain's Trainer as the hand-written loops run: no progress bar, checkpointing or logger, on the CPU;
    `settings` add to these or override them."""
    bare = {"enable_progress_bar": False, "enable_checkpointing": False, "loggers": False, "accelerator": "cpu"}
    return Trainer(**{**bare, **settings})


def check_steps(where: str, fit: Any, expected: int, timed: int, problems: list[str], logs: bool = True) -> None:
    """The sanity checks of every timed fit: its optimizer steps (timed and in all), and with `logs` the module's
    self.log('loss', ...) in the trainer's callback_metrics."""
    if fit.steps != expected or fit.timed_steps != timed:
        problems.append(
            f"{where}: took {fit.steps} optimizer steps ({fit.timed_steps} timed), expected {expected} ({timed} timed)"
        )
    if logs and not fit.logged_loss:
        problems.append(f"{where}: the module's self.log('loss', ...) is not in the trainer's callback_metrics")


def check_repeatable(where: str, key: str, trained: list[torch.Tensor], first: dict, problems: list[str]) -> bool:
    """Keeps the weights of `key`'s first fit in `first` (returns True then); a later fit of it must end on them."""
    if key not in first:
        first[key] = trained
        return True
    if not all(torch.equal(a, b) for a, b in zip(trained, first[key])):
        problems.append(f"{where}: the same fit ended with other weights than its first time")
    return False


# ------------------------------------------------------------------------------------------ the Trainer's module
class ClassifierCode:
    """The Trainer's module, written once for both frameworks: the hand-written step, plus `self.log` of the
    loss. tracktrain's is `Classifier`; Lightning's, `lightning_twin(ClassifierCode, lightning)`."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def train_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=LEARNING_RATE)


class Classifier(ClassifierCode, LoopModule):
    """tracktrain's module."""


def lightning_twin(code: type, lightning: Any) -> type:
    """Lightning's module running the very code of a tracktrain module (`code`: its methods, as a mixin), its
    train_step as training_step: line for line the same arithmetic, by construction."""
    return type(f"Lightning{code.__name__}", (code, lightning.LightningModule), {"training_step": code.train_step})


def lightning_classifier_class(lightning: Any) -> type:
    """Lightning's `Classifier` (made once Lightning is imported)."""
    return lightning_twin(ClassifierCode, lightning)


class FirstForward:
    """The clock when the network's first forward starts (`time`, None before); the hook then removes itself, so it
    costs nothing per step (a module with a hook takes torch's slower call path)."""

    def __init__(self, net: nn.Module) -> None:
        self.time: float | None = None
        self._handle = net.register_forward_pre_hook(self._hook)

    def _hook(self, module: nn.Module, inputs: Any) -> None:
        self.time = time.perf_counter()
        self._handle.remove()


@dataclass
class Fit:
    """One timed fit: `seconds` (wall clock) and `cpu_seconds` (this process's CPU time, all its threads) over its
    `timed_steps`, from its second epoch's start to its end; `logged_loss`: the module's self.log('loss', ...)
    reached the trainer's callback_metrics (True for a hand-written loop, which logs nothing)."""

    seconds: float
    timed_steps: int
    steps: int
    net: nn.Module
    logged_loss: bool = True
    cpu_seconds: float = 0.0

    @classmethod
    def timed(cls, clock: Any, trainer: Any, net: nn.Module, **extra: Any) -> Any:
        """The fit a clock (`EngineClock`, `lightning_clock`) timed on `trainer`."""
        steps = trainer.global_step
        logged = "loss" in trainer.callback_metrics
        cpu = clock.cpu_end - clock.cpu_start
        return cls(clock.end - clock.start, steps - clock.start_step, steps, net, logged, cpu, **extra)

    @property
    def us_per_step(self) -> float:
        return self.seconds / self.timed_steps * 1e6

    @property
    def cpu_us_per_step(self) -> float:
        return self.cpu_seconds / self.timed_steps * 1e6


def timed_epochs(epochs: int, run_epoch: Callable[[int], int]) -> tuple[float, float, int, int]:
    """A hand-written loop's clock: `run_epoch(epoch)` runs one epoch and returns its steps; (seconds, CPU seconds,
    timed steps, steps) from the second epoch's start to the end, as `Fit.timed` reads a Trainer's."""
    steps = steps_before = 0
    start = cpu_start = 0.0
    for epoch in range(epochs):
        if epoch == 1:
            start, cpu_start, steps_before = time.perf_counter(), time.process_time(), steps
        steps += run_epoch(epoch)
    return time.perf_counter() - start, time.process_time() - cpu_start, steps - steps_before, steps


def data_parallel_epochs(
    model: nn.Module, optimizer: torch.optim.Optimizer, dataset: TensorDataset, batch_size: int, epochs: int
) -> tuple[float, float, int, int]:
    """The hand-written data-parallel loop (DDP or FSDP2, `model` already wrapped or sharded): this rank's shard of
    `dataset` through a DistributedSampler in order (as the Trainer's is for a loader that does not shuffle),
    `set_epoch` each epoch, cross-entropy; no logging. Timed as `timed_epochs`."""
    sampler = DistributedSampler(dataset, shuffle=False)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    model.train()

    def epoch(number: int) -> int:
        sampler.set_epoch(number)
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        return len(loader)

    return timed_epochs(epochs, epoch)


class EngineClock:
    """Handlers on a Trainer's train engine that read the clocks (wall and CPU) and the step when the second epoch
    starts, and the clocks when the run completes. Attached before `fit`, they run before the Trainer's own handlers
    of each event, so the Trainer's work at every epoch's start and end (the loggers' epoch-end flushes included)
    falls inside the timed span, and the fit's end (loggers finalized) outside."""

    def __init__(self, trainer: Trainer) -> None:
        from tracktrain.engine import Events

        self.start = self.end = self.cpu_start = self.cpu_end = 0.0
        self.start_step = 0
        trainer.train_engine.add_event_handler(Events.EPOCH_STARTED, self._epoch_started)
        trainer.train_engine.add_event_handler(Events.COMPLETED, self._completed)

    def _epoch_started(self, engine: Any) -> None:
        if engine.state.epoch == 2:
            self.start, self.cpu_start = time.perf_counter(), time.process_time()
            self.start_step = engine.state.iteration

    def _completed(self) -> None:
        self.end, self.cpu_end = time.perf_counter(), time.process_time()


def lightning_clock(lightning: Any) -> Any:
    """`EngineClock` as a Lightning callback: the clocks and the step when the second epoch starts, and the clocks
    at `on_train_end` (after the last iteration's logging, before the loggers are finalized)."""

    class LightningClock(lightning.Callback):
        start = end = cpu_start = cpu_end = 0.0
        start_step = 0

        def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
            if trainer.current_epoch == 1:
                self.start, self.cpu_start = time.perf_counter(), time.process_time()
                self.start_step = trainer.global_step

        def on_train_end(self, trainer: Any, module: Any) -> None:
            self.end, self.cpu_end = time.perf_counter(), time.process_time()

    return LightningClock()


def lightning_trainer(lightning: Any, **settings: Any) -> Any:
    """Lightning's Trainer as `bare_trainer` is tracktrain's: no bar, checkpointing, logger, model summary or sanity
    validation, one CPU device; `settings` add to these or override them."""
    bare = {"enable_progress_bar": False, "enable_checkpointing": False, "logger": False, "accelerator": "cpu"}
    bare |= {"devices": 1, "enable_model_summary": False, "num_sanity_val_steps": 0}
    return lightning.Trainer(**{**bare, **settings})


# ------------------------------------------------------------------------------------------------------ peers
def silence_lightning() -> None:
    """Keeps Lightning's info logs and warnings (GPU availability, few DataLoader workers, ...) off the console,
    where they would come in every fit."""
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"lightning(\..*)?")
    warnings.filterwarnings("ignore", module=r"lightning_fabric(\..*)?")


def load_peer(name: str, *submodules: str, skip: bool = False) -> tuple[ModuleType | None, str]:
    """Imports the peer library `name` (and its `submodules`, e.g. "lightning.pytorch.callbacks") for a side-by-side
    run: (the module, its version), or (None, why it is missing) when it is left out (`skip`: by its --no-<name>
    option), not installed, or fails to import. Lightning's console noise is silenced when it loads."""
    if skip:
        return None, f"left out (--no-{name.split('.')[0]})"
    try:
        module = importlib.import_module(name)
        for submodule in submodules:
            importlib.import_module(submodule)
    except Exception as error:  # not installed, or an install that fails to import
        return None, f"not installed ({type(error).__name__}: {error})"
    if name.split(".")[0] == "lightning":
        silence_lightning()
    return module, str(getattr(module, "__version__", "?"))
