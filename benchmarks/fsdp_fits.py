"""The fits `bench_fsdp.py` runs in the processes `tracktrain.distributed.spawn` starts (a module of its own, so that
they import it by name): the block-stack model, the hand-written FSDP2 loop, `Trainer(strategy="fsdp")` and
Lightning's `ModelParallelStrategy` (FSDP2) on it, each timed from its second epoch's start to the run's end; and
the memory runs, one fresh launch per variant, that read each rank's peak resident set size.
"""

from __future__ import annotations

import functools
import math
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import harness as h
import torch
import torch.distributed as dist
import torch.nn.functional as F
import workloads
from ranks import join_group, launch, save
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from workloads import (
    Classifier,
    EngineClock,
    bare_trainer,
    check_repeatable,
    check_steps,
    data_parallel_epochs,
    lightning_clock,
    lightning_trainer,
)

RAW, TRACKTRAIN, LIGHTNING = "raw", "tracktrain", "lightning"
DDP, FSDP, RAW_FSDP = "ddp", "fsdp", "raw-fsdp"  # the memory variants
LEARNING_RATE = 1e-3
CLASSES = 10
WORLD_SIZE = 2
MMAP_THRESHOLD = "MALLOC_MMAP_THRESHOLD_"
# the memory runs' malloc settings: "live" maps every allocation of 64 KiB or more on its own and unmaps it when it
# is freed, so that the RSS follows the live tensors (and one process can fit the variants in turn, its peak reset
# before each); "default" keeps glibc's, as a user's run does: freed memory stays, so one fresh launch per variant
MALLOC_MODES: dict[str, dict[str, str]] = {"live": {MMAP_THRESHOLD: "65536"}, "default": {}}
SHARED_LAUNCH = {"live": True, "default": False}


# ---------------------------------------------------------------------------------------------------- the model
class Block(nn.Module):
    """Linear(width, hidden) / GELU / Linear(hidden, width) with a residual: an MLP block of a transformer."""

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(x)))


class BlockStack(nn.Module):
    """The blocks in an nn.ModuleList (each sharded on its own), then a classifier head (sharded with the root)."""

    def __init__(self, width: int, hidden: int, blocks: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(width, hidden) for _ in range(blocks)])
        self.head = nn.Linear(width, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def shard_stack(net: nn.Module, mesh: Any = None) -> nn.Module:
    """FSDP2 as the tutorial (and the Trainer's default) shards it: each block, then the root."""
    for block in net.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(net, mesh=mesh)
    return net


@dataclass(frozen=True)
class Shape:
    width: int
    hidden: int
    blocks: int

    def build(self, seed: int) -> BlockStack:
        torch.manual_seed(seed)
        return BlockStack(self.width, self.hidden, self.blocks)

    @property
    def parameters(self) -> int:
        return self.blocks * (2 * self.width * self.hidden + self.width + self.hidden) + (self.width + 1) * CLASSES

    def describe(self) -> str:
        return (
            f"{self.blocks} blocks of Linear({self.width},{self.hidden})/GELU/Linear({self.hidden},{self.width}) "
            f"with residuals + Linear({self.width},{CLASSES}), {self.parameters / 1e6:.2f} M parameters "
            f"({self.parameters * 4 / 2**20:.1f} MiB fp32)"
        )


def make_dataset(shape: Shape, samples: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed + 1)
    inputs = torch.randn(samples, shape.width, generator=generator)
    return TensorDataset(inputs, torch.randint(0, CLASSES, (samples,), generator=generator))


class StackModule(Classifier):
    """tracktrain's module: `Classifier`'s step (the hand-written one plus `self.log` of the loss) with AdamW, kept
    at hand."""

    def configure_optimizers(self) -> torch.optim.Optimizer:
        self.optimizer = torch.optim.AdamW(self.parameters(), lr=LEARNING_RATE)
        return self.optimizer


def lightning_module_class(lightning: Any) -> type:
    """Lightning's module, the same step; `configure_model` shards as the hand-written loop does (each block,
    then the root), over the strategy's data-parallel mesh."""

    class LightningStack(lightning.LightningModule):
        def __init__(self, net: BlockStack) -> None:
            super().__init__()
            self.net = net

        def configure_model(self) -> None:
            mesh = self.device_mesh["data_parallel"]
            for block in self.net.blocks:
                fully_shard(block, mesh=mesh)
            fully_shard(self, mesh=mesh)

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # the sharded root's: gathers the head
            return self.net(x)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = F.cross_entropy(self(x), y)
            self.log("loss", loss)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=LEARNING_RATE)

    return LightningStack


def full_weights(net: nn.Module) -> list[torch.Tensor]:
    """Every parameter in full, gathered from the shards (a collective: every rank calls it, in the same order)."""
    return [(p.full_tensor() if isinstance(p, DTensor) else p).detach().clone() for p in net.parameters()]


def local_numel(net: nn.Module) -> int:
    return sum((p.to_local() if isinstance(p, DTensor) else p).numel() for p in net.parameters())


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """The bytes of the optimizer's state tensors on this rank (a DTensor's local shard only)."""
    total = 0
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                local = value.to_local() if isinstance(value, DTensor) else value
                total += local.numel() * local.element_size()
    return total


# ---------------------------------------------------------------------------------------------------- the fits
@dataclass
class Fit(workloads.Fit):
    optimizer: torch.optim.Optimizer | None = None


@dataclass(frozen=True)
class StepConfig:
    """What the timing processes need (picklable). `samples` is the whole dataset; each rank reads half."""

    shape: Shape
    samples: int
    batch_size: int
    epochs: int
    repeats: int
    seed: int
    threads: int
    out_dir: str
    root_dir: str
    lightning: bool
    world_size: int = WORLD_SIZE

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(math.ceil(self.samples / self.world_size) / self.batch_size)

    @property
    def timed_steps(self) -> int:
        return (self.epochs - 1) * self.steps_per_epoch


def fit_raw(net: BlockStack, dataset: TensorDataset, batch_size: int, epochs: int, root_dir: str) -> Fit:
    """The hand-written FSDP2 loop, as the FSDP2 tutorial writes it: `fully_shard` on each block, then on the root;
    AdamW on the shards; then `data_parallel_epochs`."""
    shard_stack(net)
    optimizer = torch.optim.AdamW(net.parameters(), lr=LEARNING_RATE)
    seconds, cpu, timed, steps = data_parallel_epochs(net, optimizer, dataset, batch_size, epochs)
    return Fit(seconds, timed, steps, net, cpu_seconds=cpu, optimizer=optimizer)


def trainer_fit(strategy: str, net: BlockStack, dataset: TensorDataset, batch_size: int, epochs: int, root: str) -> Fit:
    """`Trainer(strategy=...)` ("fsdp", or "ddp" for the memory runs) on the unsharded loader: it finds the group
    running, shards the blocks of the ModuleList and the root, and the data."""
    trainer = bare_trainer(max_epochs=epochs, strategy=strategy, default_root_dir=root)
    clock = EngineClock(trainer)
    module = StackModule(net)
    trainer.fit(module, DataLoader(dataset, batch_size=batch_size))
    return Fit.timed(clock, trainer, net, optimizer=module.optimizer)


def fit_lightning(net: BlockStack, dataset: TensorDataset, batch_size: int, epochs: int, root_dir: str) -> Fit:
    """Lightning's `ModelParallelStrategy` (its FSDP2 strategy; `strategy="fsdp"` there is FSDP1) with data
    parallelism over both ranks. The loader brings its own in-order DistributedSampler: Lightning's
    (`use_distributed_sampler=True`) shuffles."""
    import lightning
    from lightning.pytorch.strategies import ModelParallelStrategy

    clock = lightning_clock(lightning)
    world = dist.get_world_size()
    trainer = lightning_trainer(
        lightning,
        devices=world,
        strategy=ModelParallelStrategy(data_parallel_size=world, tensor_parallel_size=1),
        max_epochs=epochs,
        callbacks=[clock],
        default_root_dir=root_dir,
        use_distributed_sampler=False,
    )
    loader = DataLoader(dataset, batch_size=batch_size, sampler=DistributedSampler(dataset, shuffle=False))
    trainer.fit(lightning_module_class(lightning)(net), loader)
    return Fit.timed(clock, trainer, net)


STEP_FITTERS: dict[str, Callable[[BlockStack, TensorDataset, int, int, str], Fit]] = {
    RAW: fit_raw,
    TRACKTRAIN: functools.partial(trainer_fit, "fsdp"),
    LIGHTNING: fit_lightning,
}


def step_process(config: StepConfig) -> None:
    """One timing process: warms each variant up with one fit, then `repeats` rounds of one fit of each, in an
    order shuffled alike on every rank (they run the same collectives), a barrier before each fit. Writes its
    samples, the full weights of each variant's first fit, the local share of the parameters and any problem."""
    rank = join_group(config.threads)
    if config.lightning:
        import lightning.pytorch  # noqa: F401  (first: importing it sets its loggers' levels)
        from workloads import silence_lightning

        silence_lightning()
    variants = [RAW, TRACKTRAIN] + ([LIGHTNING] if config.lightning else [])
    dataset = make_dataset(config.shape, config.samples, config.seed)
    initial = config.shape.build(config.seed).state_dict()
    rng = random.Random(config.seed)
    h.freeze_garbage()
    problems: list[str] = []
    first: dict[str, list[torch.Tensor]] = {}
    local_share: dict[str, float] = {}

    def run(variant: str) -> tuple[float, float]:
        net = config.shape.build(config.seed)
        net.load_state_dict(initial)
        h.before_run(config.threads)
        dist.barrier()
        fit = STEP_FITTERS[variant](net, dataset, config.batch_size, config.epochs, config.root_dir)
        where = f"[step] {variant} rank {rank}"
        check_steps(where, fit, config.epochs * config.steps_per_epoch, config.timed_steps, problems)
        if check_repeatable(where, variant, full_weights(fit.net), first, problems):
            local_share[variant] = local_numel(fit.net) / config.shape.parameters
        return fit.us_per_step, fit.cpu_us_per_step  # not the fit: its sharded net would outlive the round

    fits = h.measure(variants, config.repeats, rng, run)
    samples = {variant: [wall for wall, _ in runs] for variant, runs in fits.items()}
    cpu_samples = {variant: [cpu for _, cpu in runs] for variant, runs in fits.items()}
    result = {"samples_us": samples, "cpu_samples_us": cpu_samples, "weights": first, "local_share": local_share}
    save({**result, "problems": problems, "threads": torch.get_num_threads()}, config.out_dir, "step")


# ---------------------------------------------------------------------------------------------------- memory
@dataclass(frozen=True)
class MemoryConfig:
    shape: Shape
    batch_size: int
    steps: int  # per rank, one epoch
    seed: int
    threads: int
    out_dir: str
    root_dir: str
    world_size: int = WORLD_SIZE


def status_bytes(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1]) * 1024  # in kB
    raise RuntimeError(f"no {field} in /proc/self/status")


def rss_bytes() -> int:
    """This process's resident set size now (VmRSS)."""
    return status_bytes("VmRSS:")


def peak_rss_bytes() -> int:
    """This process's peak resident set size since start or the last `reset_peak_rss` (VmHWM)."""
    return status_bytes("VmHWM:")


MEMORY_FITTERS: dict[str, Callable[[BlockStack, TensorDataset, int, int, str], Fit]] = {
    DDP: functools.partial(trainer_fit, "ddp"),
    FSDP: functools.partial(trainer_fit, "fsdp"),
    RAW_FSDP: fit_raw,
}


def dataset_for(shape: Shape, config: MemoryConfig) -> TensorDataset:
    return make_dataset(shape, config.steps * config.batch_size * config.world_size, config.seed)


def reset_peak_rss() -> None:
    """Sets this process's peak RSS (VmHWM) back to its RSS now (Linux ≥ 4.0)."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as clear_refs:
        clear_refs.write("5")


def memory_process(config: MemoryConfig, variants: list[str]) -> None:
    """One rank of a launch that fits each of `variants` in turn (one, unless the malloc settings return freed
    memory to the system): per variant, the RSS before the model is built (the peak reset to it), after, and at
    its peak over a fit of one epoch (AdamW's state is made on the first step); the bytes of this rank's parameters
    and optimizer state; a checksum of the trained weights (every rank's must be the same)."""
    join_group(config.threads)
    dataset = dataset_for(config.shape, config)
    for variant in variants:  # warm-up on a tiny stack: a process's first distributed fit makes one-time allocations
        MEMORY_FITTERS[variant](
            Shape(64, 64, 2).build(0), dataset_for(Shape(64, 64, 2), config), 16, 1, config.root_dir
        )
    h.freeze_garbage()
    results = []
    for variant in variants:
        h.before_run(config.threads)
        dist.barrier()
        reset_peak_rss()
        before, peak_before = rss_bytes(), peak_rss_bytes()
        net = config.shape.build(config.seed)
        built = rss_bytes()
        fit = MEMORY_FITTERS[variant](net, dataset, config.batch_size, 1, config.root_dir)
        peak = peak_rss_bytes()
        weights = full_weights(fit.net)
        results.append(
            {
                "variant": variant,
                "rss_before": before,
                "peak_before": peak_before,
                "rss_built": built,
                "peak": peak,
                "local_parameter_bytes": local_numel(fit.net) * 4,
                "optimizer_state_bytes": optimizer_state_bytes(fit.optimizer) if fit.optimizer is not None else 0,
                "steps": fit.steps,
                "checksum": float(sum(w.double().sum() for w in weights)),
                "mmap_threshold": os.environ.get(MMAP_THRESHOLD),
            }
        )
        del net, fit, weights
    save(results, config.out_dir, "memory")


# ------------------------------------------------------------------------------- the memory runs, seen from the parent
def launch_memory(
    config: MemoryConfig, mode: str, variants: list[str], problems: list[str]
) -> dict[str, list[dict[str, Any]]]:
    """One launch fitting `variants` in turn under the malloc settings of `mode` (the processes inherit the
    environment): variant -> each rank's result (none when a rank failed, said in `problems`)."""
    saved = os.environ.get(MMAP_THRESHOLD)
    os.environ.pop(MMAP_THRESHOLD, None)
    os.environ.update(MALLOC_MODES[mode])
    try:
        # fresh processes: glibc reads the malloc setting at start, and a forkserver's children (the tests' default
        # start method) inherit the server's allocator and its pages, which would skew the RSS figures
        where = f"[memory] {mode} {variants}"
        arguments = (config, variants)
        ranks, _ = launch(
            memory_process, WORLD_SIZE, arguments, config.out_dir, "memory", problems, None, "spawn", where
        )
    finally:
        os.environ.pop(MMAP_THRESHOLD, None)
        if saved is not None:
            os.environ[MMAP_THRESHOLD] = saved
    return {variant: [results[index] for results in ranks] for index, variant in enumerate(variants)} if ranks else {}


def check_memory_launch(config: MemoryConfig, mode: str, variant: str, ranks: list[dict[str, Any]]) -> list[str]:
    """The sanity checks of one variant's fit: its steps, its malloc settings, a peak raised by the fit, each rank's
    share of the parameters (all under DDP, half under FSDP), AdamW's state twice that, one result."""
    problems = []
    for rank, result in enumerate(ranks):
        where = f"[memory] {mode} {variant} rank {rank}"
        if result["steps"] != config.steps:
            problems.append(f"{where}: took {result['steps']} steps, expected {config.steps}")
        if result["mmap_threshold"] != MALLOC_MODES[mode].get(MMAP_THRESHOLD):
            problems.append(f"{where}: ran with {MMAP_THRESHOLD}={result['mmap_threshold']}")
        if result["peak"] <= result["peak_before"]:
            problems.append(f"{where}: the fit did not raise the peak RSS; its figure means nothing")
        share = result["local_parameter_bytes"] / (config.shape.parameters * 4)
        expected = 1.0 if variant == DDP else 1 / WORLD_SIZE
        if abs(share - expected) > 0.01:
            problems.append(f"{where}: holds {share:.3f} of the parameters, expected {expected:g}")
        state = result["optimizer_state_bytes"] / result["local_parameter_bytes"]
        if abs(state - 2) > 0.01:
            problems.append(f"{where}: AdamW's state is {state:.3f} × its parameters, expected 2")
    if ranks[0]["checksum"] != ranks[1]["checksum"]:
        problems.append(f"[memory] {mode} {variant}: the ranks ended with different weights")
    return problems
