"""The fits `bench_step_variants.py` times: the hand-written loops and `Trainer.fit` of each precision in this
process, and of DDP in the two processes `tracktrain.distributed.spawn` starts (a module of its own, so that the
spawned processes import it by name). Each fit reads its clock from its second epoch's start to the run's end.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import harness as h
import torch
import torch.distributed as dist
import torch.nn.functional as F
import workloads
from ranks import join_group, save
from torch import nn
from workloads import (
    LEARNING_RATE,
    Classifier,
    ClassifierData,
    EngineClock,
    bare_trainer,
    check_repeatable,
    check_steps,
    data_parallel_epochs,
    timed_epochs,
    weights,
)

RAW, TRACKTRAIN = "raw", "tracktrain"
MEDIUM = (256, 512, 512, 10)
BATCH_SIZE = 64
WORLD_SIZE = 2


def medium_data(batches_per_epoch: int, seed: int) -> ClassifierData:
    """The medium MLP's initial weights and its data, the same in every process built with the same seed."""
    return ClassifierData(MEDIUM, BATCH_SIZE, batches_per_epoch, seed)


@dataclass
class Fit(workloads.Fit):
    scale: float | None = None  # the GradScaler's scale at the end (fp16)


def fit_raw(workload: ClassifierData, precision: Any, epochs: int, root_dir: str) -> Fit:
    """The hand-written loop of `precision`, written out as a user would (no context manager or scaler where the
    precision needs none). No logging."""
    net = workload.fresh_net()
    optimizer = torch.optim.SGD(net.parameters(), lr=LEARNING_RATE)
    scaler = torch.amp.GradScaler("cpu") if precision.grad_scaler else None
    dtype = precision.autocast_dtype
    net.train()

    def epoch(_: int) -> int:
        if scaler is not None:
            for x, y in workload.loader:
                optimizer.zero_grad()
                with torch.autocast("cpu", dtype=dtype):
                    loss = F.cross_entropy(net(x), y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
        elif dtype is not None:
            for x, y in workload.loader:
                optimizer.zero_grad()
                with torch.autocast("cpu", dtype=dtype):
                    loss = F.cross_entropy(net(x), y)
                loss.backward()
                optimizer.step()
        else:
            for x, y in workload.loader:
                optimizer.zero_grad()
                loss = F.cross_entropy(net(x), y)
                loss.backward()
                optimizer.step()
        return len(workload.loader)

    seconds, cpu, timed, steps = timed_epochs(epochs, epoch)
    return Fit(seconds, timed, steps, net, cpu_seconds=cpu, scale=scaler.get_scale() if scaler is not None else None)


def fit_tracktrain(workload: ClassifierData, precision: Any, epochs: int, root_dir: str) -> Fit:
    net = workload.fresh_net()
    trainer = bare_trainer(max_epochs=epochs, precision=precision.trainer_precision, default_root_dir=root_dir)
    clock = EngineClock(trainer)
    trainer.fit(Classifier(net), workload.loader)
    scaler = trainer.model_engine.scaler
    return Fit.timed(clock, trainer, net, scale=scaler.get_scale() if scaler is not None else None)


FITTERS: dict[str, Callable[[ClassifierData, Any, int, str], Fit]] = {RAW: fit_raw, TRACKTRAIN: fit_tracktrain}


@dataclass(frozen=True)
class DDPConfig:
    """What the launched processes need (picklable: it travels to them). `batches_per_epoch` counts the whole
    dataset's batches; each rank reads its share."""

    batches_per_epoch: int
    epochs: int
    repeats: int
    seed: int
    threads: int
    out_dir: str
    root_dir: str

    @property
    def steps_per_epoch(self) -> int:
        """Batches per epoch on each rank: a DistributedSampler gives each ceil(samples / ranks) samples."""
        return math.ceil(math.ceil(self.batches_per_epoch * BATCH_SIZE / WORLD_SIZE) / BATCH_SIZE)

    @property
    def timed_steps(self) -> int:
        return (self.epochs - 1) * self.steps_per_epoch


def fit_raw_ddp(workload: ClassifierData, epochs: int, root_dir: str) -> Fit:
    """The hand-written DDP loop (`data_parallel_epochs`) on DistributedDataParallel and SGD."""
    net = workload.fresh_net()
    model = nn.parallel.DistributedDataParallel(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    seconds, cpu, timed, steps = data_parallel_epochs(model, optimizer, workload.dataset, BATCH_SIZE, epochs)
    return Fit(seconds, timed, steps, net, cpu_seconds=cpu)


def fit_tracktrain_ddp(workload: ClassifierData, epochs: int, root_dir: str) -> Fit:
    """`Trainer(strategy="ddp")` on the unsharded loader: it finds the process group running and shards the data."""
    net = workload.fresh_net()
    trainer = bare_trainer(max_epochs=epochs, strategy="ddp", default_root_dir=root_dir)
    clock = EngineClock(trainer)
    trainer.fit(Classifier(net), workload.loader)
    return Fit.timed(clock, trainer, net)


DDP_FITTERS: dict[str, Callable[[ClassifierData, int, str], Fit]] = {RAW: fit_raw_ddp, TRACKTRAIN: fit_tracktrain_ddp}


def ddp_process(config: DDPConfig) -> None:
    """One rank: a warm-up fit of each variant, then `repeats` rounds of one fit of each, in an order shuffled alike
    on every rank (they run the same collectives). Saves its samples, the weights of each variant's first fit and
    any problem; rank 0's samples are the ones reported."""
    rank = join_group(config.threads)
    workload = medium_data(config.batches_per_epoch, config.seed)
    rng = random.Random(config.seed)
    h.freeze_garbage()
    problems: list[str] = []
    first: dict[str, list[torch.Tensor]] = {}

    def run(variant: str) -> float:
        h.before_run(config.threads)
        dist.barrier()  # the ranks start each fit together
        fit = DDP_FITTERS[variant](workload, config.epochs, config.root_dir)
        where = f"[ddp] {variant} rank {rank}"
        check_steps(where, fit, config.epochs * config.steps_per_epoch, config.timed_steps, problems)
        check_repeatable(where, variant, weights(fit.net), first, problems)
        return fit.us_per_step

    # the same seed on every rank: the same shuffled order, so the ranks run the same collectives
    samples = h.measure(list(DDP_FITTERS), config.repeats, rng, run)
    result = {"samples_us": samples, "weights": first, "problems": problems, "threads": torch.get_num_threads()}
    save(result, config.out_dir, "ddp")
