"""What `bench_dcp.py` runs in the processes `tracktrain.distributed.spawn` starts (a module of its own, so that they
import it by name): fits of the block stack that save every `every` steps, each timed around its save call, with
tracktrain's `ModelCheckpoint` (sharded or full, async or blocking), a hand-written loop calling
`torch.distributed.checkpoint.save` / `async_save`, and Lightning Fabric's `ModelParallelStrategy` (`fabric.save`);
then loads of one checkpoint of each kind on 2 ranks, and of the 2-rank sharded checkpoint on 4 ranks.

Every fit trains a fresh copy of the same weights on the same batches (each rank its half, in order). What a rank
measures and checks goes to its own file, which the parent reads.
"""

from __future__ import annotations

import os
import random
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import harness as h
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from fsdp_fits import LEARNING_RATE, Shape, StackModule, make_dataset, shard_stack
from ranks import join_group, save
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from workloads import FirstForward, bare_trainer, state_difference

from tracktrain.callbacks import ModelCheckpoint
from tracktrain.checkpoint.discovery import committed_checkpoints
from tracktrain.checkpoint.state import read_checkpoint
from tracktrain.distributed.logger import get_dist_logger
from tracktrain.trainer.strategies.fsdp import FSDPStrategy

# the saving variants
TT_ASYNC, TT_BLOCKING = "tt-sharded-async", "tt-sharded-blocking"
TT_FULL_ASYNC, TT_FULL_BLOCKING = "tt-full-async", "tt-full-blocking"
RAW_SAVE, RAW_ASYNC, FABRIC = "dcp.save", "dcp.async_save", "fabric"
# the same fits without checkpoints: each framework's baseline for the fit's total time
TT_NONE, RAW_NONE, FABRIC_NONE = "tt-none", "raw-none", "fabric-none"
BASELINE_OF = {
    TT_ASYNC: TT_NONE,
    TT_BLOCKING: TT_NONE,
    TT_FULL_ASYNC: TT_NONE,
    TT_FULL_BLOCKING: TT_NONE,
    RAW_SAVE: RAW_NONE,
    RAW_ASYNC: RAW_NONE,
    FABRIC: FABRIC_NONE,
}
# the loads: (kind of checkpoint, how it is loaded)
LOAD_TT_SHARDED, LOAD_TT_FULL, LOAD_RAW, LOAD_FABRIC = "tt-sharded", "tt-full", "dcp.load", "fabric.load"
# and by one process, of the 2-rank checkpoints: read whole, by a single-process Trainer, with dcp.load(no_dist=True)
LOAD_READ, LOAD_TT_1, LOAD_RAW_1 = "read_checkpoint(url)", "tt-1-process", "dcp.load-1-process"
ONE_PROCESS_SOURCE = {LOAD_READ: LOAD_TT_SHARDED, LOAD_TT_1: LOAD_TT_SHARDED, LOAD_RAW_1: LOAD_RAW}
# which saving fit writes the checkpoint each load reads
SOURCE_OF = {LOAD_TT_SHARDED: TT_BLOCKING, LOAD_TT_FULL: TT_FULL_BLOCKING, LOAD_RAW: RAW_SAVE, LOAD_FABRIC: FABRIC}
WORLD_SIZE = 2
RESHARD_WORLD_SIZE = 4


@dataclass(frozen=True)
class DcpConfig:
    """What the processes need (picklable)."""

    shape: Shape
    batch_size: int  # per rank
    every: int  # steps between checkpoints
    saves: int  # checkpoints per timed fit
    repeats: int  # timed rounds (after one warm-up round)
    load_repeats: int
    seed: int
    threads: int
    out_dir: str  # the ranks' result files
    root_dir: str  # checkpoints and run directories
    variants: tuple[str, ...]
    loads: tuple[str, ...]

    @property
    def max_steps(self) -> int:
        """Saves at every, 2·every, ..., saves·every, then every−1 more steps: the last save's write (in the
        background, for the async variants) has as many steps to overlap as the others."""
        return (self.saves + 1) * self.every - 1

    @property
    def save_steps(self) -> list[int]:
        return [self.every * k for k in range(1, self.saves + 1)]

    def dataset(self, world_size: int = WORLD_SIZE) -> TensorDataset:
        """One epoch of `max_steps` batches per rank, on `world_size` ranks."""
        return make_dataset(self.shape, self.max_steps * self.batch_size * world_size, self.seed)


# ---------------------------------------------------------------------------------------------------- states
def full_state(module: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """The full model state and AdamW's state, keyed by parameter name, gathered on every rank (a collective)."""
    options = StateDictOptions(full_state_dict=True)
    state = {
        f"model/{name}": value.detach().clone() for name, value in get_model_state_dict(module, options=options).items()
    }
    for name, moments in get_optimizer_state_dict(module, optimizer, options=options)["state"].items():
        for key, value in moments.items():
            state[f"optim/{name}/{key}"] = torch.as_tensor(value).detach().clone()
    return state


def plain_full_state(model: dict[str, torch.Tensor], optimizer: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """`full_state`'s form of a model state dict and an optimizer state keyed by index (`names`: the parameters in
    the order of the optimizer's groups)."""
    state = {f"model/{name}": value for name, value in model.items()}
    for index, moments in optimizer["state"].items():
        for key, value in moments.items():
            state[f"optim/{names[int(index)]}/{key}"] = torch.as_tensor(value)
    return state


def checksum(state: dict[str, torch.Tensor]) -> float:
    return float(sum(value.double().sum() for value in state.values()))


# ------------------------------------------------------------------------------------------------------ fits
@dataclass
class Fit:
    """One fit on this rank: the loop's time blocked by each save call (s), the time from the first step's start to
    the end of the fit (every write finished), its steps, the checkpoints it left (step -> path), its module and
    optimizer (for the full state), and what its checks found."""

    stalls: list[float]
    total: float
    steps: int
    written: dict[int, str] = field(default_factory=dict)
    module: nn.Module | None = None
    optimizer: torch.optim.Optimizer | None = None
    problems: list[str] = field(default_factory=list)


class TimedModelCheckpoint(ModelCheckpoint):
    """tracktrain's `ModelCheckpoint`, its save timed in the loop: `_save` is what `on_train_batch_end` calls when a
    checkpoint is due (the state's collection, and the write or the async save's wait and CPU snapshot)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stalls: list[float] = []

    def _save(self, trainer: Any) -> None:
        start = time.perf_counter()
        super()._save(trainer)
        self.stalls.append(time.perf_counter() - start)


def tracktrain_fit(
    config: DcpConfig, net: nn.Module, directory: str | None, state_dict_type: str, async_save: bool, max_steps: int
) -> Fit:
    """`Trainer(strategy=FSDPStrategy(state_dict_type=...))` with a `ModelCheckpoint` every `config.every` steps
    into `directory` (None: no checkpoints), keeping all of them."""
    callbacks = (
        []
        if directory is None
        else [
            TimedModelCheckpoint(
                dirpath=directory, save_top_k=None, every_n_train_steps=config.every, async_save=async_save
            )
        ]
    )
    run_dir = os.path.join(config.root_dir, "runs", f"rank{dist.get_rank()}")
    trainer = bare_trainer(
        max_steps=max_steps,
        strategy=FSDPStrategy(state_dict_type=state_dict_type),
        enable_checkpointing=directory is not None,
        callbacks=callbacks,
        default_root_dir=run_dir,
    )
    clock = FirstForward(net)
    module = StackModule(net)
    trainer.fit(module, DataLoader(config.dataset(), batch_size=config.batch_size))
    end = time.perf_counter()
    fit = Fit(callbacks[0].stalls if callbacks else [], end - (clock.time or end), trainer.global_step)
    fit.module, fit.optimizer = module, module.optimizer
    if directory is not None:
        fit.problems += check_tracktrain_dir(directory, config, max_steps, state_dict_type)
        extension = "dcp" if state_dict_type == "sharded" else "pt"
        fit.written = {
            step: os.path.join(directory, f"checkpoint_{step}.{extension}")
            for step in range(1, max_steps + 1)
            if step % config.every == 0
        }
    return fit


def check_tracktrain_dir(directory: str, config: DcpConfig, max_steps: int, state_dict_type: str) -> list[str]:
    """Rank 0: every checkpoint due was committed (its manifest written, listing every rank's shards for a sharded
    one), none is incomplete."""
    if dist.get_rank() != 0:
        return []
    where = f"[save] tracktrain {state_dict_type}"
    found, incomplete = committed_checkpoints(directory)
    problems = [f"{where}: incomplete checkpoint: {problem}" for problem in incomplete]
    steps = sorted(int(checkpoint.summary.get("global_step", -1)) for checkpoint in found)
    expected = [step for step in range(1, max_steps + 1) if step % config.every == 0]
    if steps != expected:
        problems.append(f"{where}: committed checkpoints of steps {steps}, expected {expected}")
    for checkpoint in found:
        if state_dict_type == "sharded":
            shards = {name.rsplit("/", 1)[-1] for name in checkpoint.manifest["files"]}
            wanted = {".metadata"} | {f"__{rank}_0.distcp" for rank in range(dist.get_world_size())}
            if not wanted <= shards:
                problems.append(
                    f"{where}: {checkpoint.data_filename}'s manifest lists {sorted(shards)}, not every rank's"
                )
    return problems


def saving_loop(
    config: DcpConfig, directory: str | None, max_steps: int, step: Callable[[Any, Any], None], save: Callable
) -> tuple[list[float], dict[int, str], int, float]:
    """A hand-written loop over this rank's half of the data (in order): `step(x, y)` each batch, and `save(path,
    step)` (timed: the stall) every `config.every` steps into `directory/step_<n>` (none when None). (The stalls,
    step -> path written, the steps, the seconds from the first step's start to the end.)"""
    dataset = config.dataset()
    loader = DataLoader(dataset, batch_size=config.batch_size, sampler=DistributedSampler(dataset, shuffle=False))
    stalls: list[float] = []
    written: dict[int, str] = {}
    steps = 0
    start = time.perf_counter()
    for x, y in loader:
        step(x, y)
        steps += 1
        if directory is not None and steps % config.every == 0:
            written[steps] = path = os.path.join(directory, f"step_{steps}")
            save_start = time.perf_counter()
            save(path, steps)
            stalls.append(time.perf_counter() - save_start)
        if steps == max_steps:
            break
    return stalls, written, steps, start


def raw_fit(config: DcpConfig, net: nn.Module, directory: str | None, mode: str, max_steps: int, group: Any) -> Fit:
    """The hand-written FSDP2 loop, saving `{"model": ..., "optim": ...}` (the state dicts of
    `torch.distributed.checkpoint.state_dict`, as torchtitan does): with `dcp.save`, or with `dcp.async_save` on a
    gloo group of its own after waiting for the previous save's future (torchtitan's `async_mode="async"`).
    `mode`: "save", "async" or "none"."""
    shard_stack(net)
    optimizer = torch.optim.AdamW(net.parameters(), lr=LEARNING_RATE)
    futures: list[Any] = []

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        optimizer.zero_grad()
        F.cross_entropy(net(x), y).backward()
        optimizer.step()

    def save(path: str, _: int) -> None:
        state = {"model": get_model_state_dict(net), "optim": get_optimizer_state_dict(net, optimizer)}
        if mode == "async":
            if futures:
                futures.pop().result()
            futures.append(dcp.async_save(state, checkpoint_id=path, process_group=group))
        else:
            dcp.save(state, checkpoint_id=path)

    stalls, written, steps, start = saving_loop(config, directory, max_steps, step, save)
    for future in futures:
        future.result()
    fit = Fit(stalls, time.perf_counter() - start, steps, written, net, optimizer)
    fit.problems += check_dcp_dirs(written, "[save] " + ("dcp.async_save" if mode == "async" else "dcp.save"))
    return fit


def check_dcp_dirs(written: dict[int, str], where: str) -> list[str]:
    """Rank 0: every directory DCP wrote holds its `.metadata` (written by the coordinator once every rank's shards
    are: DCP's own commit) and every rank's shard file."""
    if dist.get_rank() != 0:
        return []
    problems = []
    for path in written.values():
        names = set(os.listdir(path)) if os.path.isdir(path) else set()
        if ".metadata" not in names:
            problems.append(f"{where}: {path} has no .metadata (not committed)")
        if len([name for name in names if name.endswith(".distcp")]) < dist.get_world_size():
            problems.append(f"{where}: {path} holds {sorted(names)}, not one shard file per rank")
    return problems


def fabric_objects(config: DcpConfig, net: nn.Module) -> tuple[Any, Any, Any]:
    """Lightning Fabric with `ModelParallelStrategy` (its FSDP2 strategy) over both ranks, sharding as the raw loop
    does: (fabric, model, optimizer). It finds the process group running."""
    import lightning.fabric as fabric_package
    from lightning.fabric.strategies import ModelParallelStrategy

    world = dist.get_world_size()

    def parallelize(module: nn.Module, mesh: Any) -> nn.Module:
        return shard_stack(module, mesh["data_parallel"])

    strategy = ModelParallelStrategy(parallelize, data_parallel_size=world, tensor_parallel_size=1)
    fabric = fabric_package.Fabric(accelerator="cpu", devices=world, strategy=strategy)
    fabric.launch()
    model = fabric.setup(net)
    optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE))
    return fabric, model, optimizer


def fabric_fit(config: DcpConfig, net: nn.Module, directory: str | None, max_steps: int) -> Fit:
    """A Fabric loop saving `{"model", "optimizer", "step"}` with `fabric.save(directory/step_<n>, state)`: a DCP
    checkpoint (every rank its shards) plus rank 0's `meta.pt`, blocking."""
    fabric, model, optimizer = fabric_objects(config, net)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        optimizer.zero_grad()
        fabric.backward(F.cross_entropy(model(x), y))
        optimizer.step()

    def save(path: str, steps: int) -> None:
        fabric.save(path, {"model": model, "optimizer": optimizer, "step": steps})

    stalls, written, steps, start = saving_loop(config, directory, max_steps, step, save)
    fit = Fit(stalls, time.perf_counter() - start, steps, written, net, optimizer.optimizer)
    fit.problems += check_dcp_dirs(written, "[save] fabric.save")
    return fit


def run_fit(config: DcpConfig, variant: str, directory: str | None, max_steps: int, group: Any) -> Fit:
    net = config.shape.build(config.seed)
    saving = None if variant in (TT_NONE, RAW_NONE, FABRIC_NONE) else directory
    if variant in (TT_ASYNC, TT_BLOCKING, TT_FULL_ASYNC, TT_FULL_BLOCKING, TT_NONE):
        kind = "full" if variant in (TT_FULL_ASYNC, TT_FULL_BLOCKING) else "sharded"
        return tracktrain_fit(config, net, saving, kind, variant in (TT_ASYNC, TT_FULL_ASYNC), max_steps)
    if variant in (RAW_SAVE, RAW_ASYNC, RAW_NONE):
        return raw_fit(
            config, net, saving, {RAW_SAVE: "save", RAW_ASYNC: "async"}.get(variant, "none"), max_steps, group
        )
    return fabric_fit(config, net, saving, max_steps)


# ----------------------------------------------------------------------------------------------------- loads
@dataclass
class Load:
    """One load on this rank: the loading alone (s), and the whole call that does it (a finished run's `fit`)."""

    seconds: float
    call_seconds: float
    state: dict[str, torch.Tensor]
    step: int


def tracktrain_load(config: DcpConfig, path: str, state_dict_type: str, max_steps: int) -> Load:
    """`Trainer(strategy=FSDPStrategy(...), max_steps=<the checkpoint's step>).fit(..., ckpt_path=path)`: the run
    is already finished, so the fit loads the checkpoint and returns. Timed: the whole call, and the loading in it
    (`trainer.checkpoints.load`: reading, each rank its own shards, and `Checkpoint.load_objects`)."""
    net = config.shape.build(config.seed + 1)  # other weights than the checkpoint's
    trainer = bare_trainer(
        max_steps=max_steps,
        strategy=FSDPStrategy(state_dict_type=state_dict_type) if dist.is_initialized() else "auto",
        default_root_dir=os.path.join(
            config.root_dir, "loads", f"rank{dist.get_rank() if dist.is_initialized() else 0}"
        ),
    )
    checkpoints = trainer.checkpoints
    load = checkpoints.load
    seconds: list[float] = []

    def timed_load(*args: Any) -> None:  # the benchmark's clock on the Trainer's own loading, whatever it is given
        start = time.perf_counter()
        load(*args)
        seconds.append(time.perf_counter() - start)

    checkpoints.load = timed_load
    module = StackModule(net)
    start = time.perf_counter()
    trainer.fit(module, DataLoader(config.dataset(), batch_size=config.batch_size), ckpt_path=path)
    call = time.perf_counter() - start
    return Load(
        seconds[0] if seconds else float("nan"), call, full_state(module, module.optimizer), trainer.global_step
    )


def raw_load(config: DcpConfig, path: str, step: int) -> Load:
    """The hand-written FSDP2 model (in one process: the plain one) and AdamW, then `dcp.load` of `{"model": ..., "optim": ...}` and
    `set_model_state_dict` / `set_optimizer_state_dict` (torchtitan's way). Timed from building the state dicts
    (the optimizer's state made by `get_optimizer_state_dict`) to the end of the last set."""
    distributed = dist.is_initialized()  # else one process reads every shard, whole (no_dist)
    net = config.shape.build(config.seed + 1)
    if distributed:
        shard_stack(net)
    optimizer = torch.optim.AdamW(net.parameters(), lr=LEARNING_RATE)
    start = time.perf_counter()
    state = {"model": get_model_state_dict(net), "optim": get_optimizer_state_dict(net, optimizer)}
    dcp.load(state, checkpoint_id=path, no_dist=not distributed)
    set_model_state_dict(net, state["model"])
    set_optimizer_state_dict(net, optimizer, state["optim"])
    seconds = time.perf_counter() - start
    return Load(seconds, seconds, full_state(net, optimizer), step)


def fabric_load(config: DcpConfig, path: str, step: int) -> Load:
    """Fabric set up as when saving, then `fabric.load(path, {"model", "optimizer"})` (timed)."""
    fabric, model, optimizer = fabric_objects(config, config.shape.build(config.seed + 1))
    state = {"model": model, "optimizer": optimizer}
    start = time.perf_counter()
    remainder = fabric.load(path, state)
    seconds = time.perf_counter() - start
    return Load(seconds, seconds, full_state(model.module, optimizer.optimizer), int(remainder.get("step", -1)))


def read_load(config: DcpConfig, path: str, step: int) -> Load:
    """tracktrain's sharded checkpoint read whole by this process alone (`read_checkpoint`, every shard), timed."""
    start = time.perf_counter()
    states = read_checkpoint(path)
    seconds = time.perf_counter() - start
    names = [name for name, _ in StackModule(config.shape.build(0)).named_parameters()]
    state = plain_full_state(states["model"], states["optimizers"][0], names)
    return Load(seconds, seconds, state, int(states["trainer"]["global_step"]))


def run_load(config: DcpConfig, kind: str, path: str, step: int) -> Load:
    if kind == LOAD_READ:
        return read_load(config, path, step)
    if kind in (LOAD_TT_SHARDED, LOAD_TT_1):
        return tracktrain_load(config, path, "sharded", step)
    if kind == LOAD_TT_FULL:
        return tracktrain_load(config, path, "full", step)
    if kind in (LOAD_RAW, LOAD_RAW_1):
        return raw_load(config, path, step)
    return fabric_load(config, path, step)


# ------------------------------------------------------------------------------------------------ the ranks
def dcp_process(config: DcpConfig) -> None:
    """One rank: a warm-up round and `repeats` rounds of one fit of each saving variant (order shuffled alike on
    every rank, a barrier before each), their checkpoints checked and removed; then one source fit per kind of
    checkpoint loaded (saving once, at its last step) whose full state is the reference, and a warm-up round and
    `load_repeats` rounds of one load of each, checked against it. Writes its samples, the sources' paths and
    references (rank 0's) and any problem."""
    rank = join_group(config.threads)
    quiet()
    if FABRIC in config.variants:
        import lightning.fabric  # noqa: F401  (first: importing it sets its loggers' levels)
        from workloads import silence_lightning

        silence_lightning()
    group = dist.new_group(backend="gloo")  # the raw async saves' collectives, apart from the training step's
    rng = random.Random(config.seed)
    h.freeze_garbage()
    problems: list[str] = []
    stalls: dict[str, list[list[float]]] = {variant: [] for variant in config.variants}
    totals: dict[str, list[float]] = {variant: [] for variant in config.variants}
    for repeat, variant in h.interleaved(config.variants, config.repeats + 1, rng):  # round 0 warms up
        directory = os.path.join(config.root_dir, "saves", variant)
        h.before_run(config.threads)
        dist.barrier()
        fit = run_fit(config, variant, directory, config.max_steps, group)
        problems += fit.problems
        saves = 0 if variant in BASELINE_OF.values() else config.saves
        if fit.steps != config.max_steps or len(fit.stalls) != saves:
            problems.append(
                f"[save] {variant} rank {rank}: {fit.steps} steps and {len(fit.stalls)} timed saves, expected "
                f"{config.max_steps} and {saves}"
            )
        if repeat:
            stalls[variant].append(fit.stalls)
            totals[variant].append(fit.total)
        del fit
        dist.barrier()
        if rank == 0:
            shutil.rmtree(directory, ignore_errors=True)

    # the checkpoints loaded: one per kind, written at the last step of a fit of `every` steps
    sources: dict[str, str] = {}
    references: dict[str, dict[str, torch.Tensor]] = {}
    for kind in config.loads:
        variant = SOURCE_OF[kind]
        h.before_run(config.threads)
        dist.barrier()
        fit = run_fit(config, variant, os.path.join(config.root_dir, "sources", kind), config.every, group)
        problems += fit.problems
        if config.every not in fit.written:
            problems.append(f"[load] {kind} rank {rank}: the source fit wrote no checkpoint of step {config.every}")
            continue
        sources[kind] = fit.written[config.every]
        assert fit.module is not None and fit.optimizer is not None
        references[kind] = full_state(fit.module, fit.optimizer)
        del fit

    where = f"[load] on {WORLD_SIZE} ranks, rank {rank}"
    loads, calls, checksums = measure_loads(config, list(sources), sources, references, rng, where, problems)
    result = {"stalls": stalls, "totals": totals, "loads": loads, "load_calls": calls, "checksums": checksums}
    result |= {"sources": sources, "references": references if rank == 0 else {}, "problems": problems}
    save({**result, "threads": torch.get_num_threads()}, config.out_dir, "save")


def measure_loads(
    config: DcpConfig,
    kinds: list[str],
    sources: dict[str, str],
    references: dict[str, dict[str, torch.Tensor]],
    rng: random.Random,
    where: str,
    problems: list[str],
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, float]]:
    """A warm-up round and `load_repeats` rounds of one load of each of `kinds` (a barrier before each, on several
    ranks), each checked
    against its reference: per kind the loads' and the whole calls' seconds, and a checksum of the state loaded."""
    loads: dict[str, list[float]] = {kind: [] for kind in kinds}
    calls: dict[str, list[float]] = {kind: [] for kind in kinds}
    checksums: dict[str, float] = {}
    for repeat, kind in h.interleaved(kinds, config.load_repeats + 1, rng):
        h.before_run(config.threads)
        if dist.is_initialized():
            dist.barrier()
        loaded = run_load(config, kind, sources[kind], config.every)
        problems += check_load(loaded, references[kind], config.every, f"{where}: {kind}")
        checksums.setdefault(kind, checksum(loaded.state))
        if repeat:
            loads[kind].append(loaded.seconds)
            calls[kind].append(loaded.call_seconds)
        del loaded
    return loads, calls, checksums


def quiet() -> None:
    """Keeps the Trainer's info line of every load ("Run already finished at ...") off the console, and the
    warning of each load on 4 ranks that the checkpoint holds the random generators of 2 (expected here)."""
    get_dist_logger().set_level("WARNING")
    warnings.filterwarnings("ignore", message="The checkpoint holds random generator states for")


def check_load(loaded: Load, reference: dict[str, torch.Tensor], step: int, where: str) -> list[str]:
    """The loaded weights and AdamW state are the saved ones bit for bit, and the step is the checkpoint's."""
    problems = []
    if loaded.step != step:
        problems.append(f"{where}: loaded step {loaded.step}, the checkpoint's is {step}")
    wrong = state_difference(loaded.state, reference)
    if wrong is not None:
        problems.append(f"{where}: the loaded state is not the saved one: {wrong}")
    return problems


def reshard_process(config: DcpConfig, sources: dict[str, str], reference_file: str) -> None:
    """One of `RESHARD_WORLD_SIZE` ranks loading the 2-rank checkpoints (tracktrain's sharded one with the Trainer,
    the raw loop's with `dcp.load`): a warm-up round and `load_repeats` rounds, checked against the references."""
    rank = join_group(config.threads)
    quiet()
    references = torch.load(reference_file)
    rng = random.Random(config.seed)
    kinds = [kind for kind in (LOAD_TT_SHARDED, LOAD_RAW) if kind in sources]
    h.freeze_garbage()
    problems: list[str] = []
    where = f"[reshard] on {RESHARD_WORLD_SIZE} ranks, rank {rank}"
    loads, _, checksums = measure_loads(config, kinds, sources, references, rng, where, problems)
    save({"loads": loads, "checksums": checksums, "problems": problems}, config.out_dir, "reshard")
