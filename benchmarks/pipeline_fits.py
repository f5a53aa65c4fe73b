"""What `bench_pipeline.py` runs, in its own process and in the ranks `tracktrain.distributed.spawn` starts (a module of
its own, so that they import it by name): the model of cost blocks (a small Linear, then a sleep forward and twice as
long backward, adding what it slept to `BUSY`), the bubble each schedule predicts and the ideal busy times, the timed
training step, and the runs: every (schedule, M) case on one rank of a pipeline, which writes what it measured to its
own file for the parent to read, and the baseline on the whole batch in one process.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, NamedTuple

import harness as h
import torch
import torch.distributed as dist
from ranks import join_group, save
from torch import nn

from tracktrain.engine import ModelEngine
from tracktrain.engine.pipeline import PipelineSchedule, split_stages

BACKWARD_RATIO = 2.0  # a block's backward costs twice its forward, as a Linear layer's does
STAGES_PER_RANK = {"gpipe": 1, "1f1b": 1, "interleaved_1f1b": 2}  # v
WIDTH = 32


# ---------------------------------------------------------------------------------------------- the workload
class _Cost(torch.autograd.Function):
    """Identity whose forward sleeps `seconds` and whose backward sleeps `BACKWARD_RATIO` × `seconds`, adding the
    time actually slept to `BUSY` (a rank's measured busy time; time.sleep overshoots a little)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, seconds: float) -> torch.Tensor:
        ctx.seconds = seconds
        _sleep(seconds)
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        _sleep(BACKWARD_RATIO * ctx.seconds)
        return grad, None


BUSY = [0.0]  # seconds slept in this process since the last reset


def _sleep(seconds: float) -> None:
    started = time.perf_counter()
    time.sleep(seconds)
    BUSY[0] += time.perf_counter() - started


class CostBlock(nn.Module):
    """Linear, tanh, then a simulated compute cost proportional to the rows: `seconds_per_sample` × rows forward,
    twice that backward. Meta tensors (shape inference) cost nothing."""

    def __init__(self, width: int, seconds_per_sample: float) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.seconds_per_sample = seconds_per_sample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(self.linear(x))
        if x.is_meta:
            return x
        return _Cost.apply(x, self.seconds_per_sample * x.shape[0])


@dataclass(frozen=True)
class PipelineConfig:
    blocks: int  # L
    batch_size: int  # B
    forward_ms: float  # F: one block's forward on the whole batch
    microbatches: tuple[int, ...]
    world_sizes: tuple[int, ...]
    schedules: tuple[str, ...]
    warmup: int
    repeats: int
    steps: int
    seed: int
    threads: int
    out_dir: str

    @property
    def seconds_per_sample(self) -> float:
        return self.forward_ms / 1e3 / self.batch_size

    @property
    def cases(self) -> list[tuple[str, int]]:
        """(schedule, M) of every run, on each rank count."""
        return [(schedule, m) for schedule in self.schedules for m in self.microbatches]


def make_model(config: PipelineConfig) -> nn.Sequential:
    torch.manual_seed(config.seed)
    blocks = [(f"block{index}", CostBlock(WIDTH, config.seconds_per_sample)) for index in range(config.blocks)]
    return nn.Sequential(OrderedDict(blocks))


def make_batch(config: PipelineConfig) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(config.seed + 1)
    return torch.randn(config.batch_size, WIDTH, generator=generator), torch.randn(
        config.batch_size, WIDTH, generator=generator
    )


def split_points(blocks: int, stages: int) -> list[str]:
    every = blocks // stages
    return [f"block{index}" for index in range(every, blocks, every)]


# ------------------------------------------------------------------------------- what the schedules predict
def stage_count(schedule: str, world: int) -> int:
    return STAGES_PER_RANK[schedule] * world


def predicted_bubble(schedule: str, world: int, microbatches: int) -> float:
    """The fraction of a step each rank idles, p = `world` ranks, m micro-batches, v stages per rank:
    (p − 1) / (v·m + p − 1). Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
    Megatron-LM" (SC'21), §2.2.1: GPipe and 1F1B idle (p − 1)·(t_f + t_b) beside m·(t_f + t_b) of work, a bubble of
    (p − 1)/m of the ideal time, so (p − 1)/(m + p − 1) of the step (GPipe, Huang et al. 2019, §2.3); §2.2.2: the
    interleaved schedule, v model chunks per device, shrinks the bubble v times, (p − 1)/(v·m) of the ideal time. The
    torch.distributed.pipelining docs describe ScheduleInterleaved1F1B as this schedule (v = stages per rank)."""
    v = STAGES_PER_RANK[schedule]
    return (world - 1) / (v * microbatches + world - 1)


def ideal_busy_s(config: PipelineConfig, world: int) -> float:
    """Each rank's share of the model's forward and backward on the whole batch: (L / p) × (F + 2F)."""
    return config.blocks / world * config.forward_ms / 1e3 * (1 + BACKWARD_RATIO)


def one_process_ideal_s(config: PipelineConfig) -> float:
    return config.blocks * config.forward_ms / 1e3 * (1 + BACKWARD_RATIO)


# ------------------------------------------------------------------------------------------------------ runs
class Step(NamedTuple):
    seconds: float  # wall-clock time of the step
    slept: float  # of which in the cost blocks' sleeps
    cpu: float  # CPU time of the process (all its threads, gloo's included) during the step
    loss: float


def _timed_step(engine: ModelEngine, batch: tuple[torch.Tensor, torch.Tensor]) -> Step:
    """One training step on `batch`, timed."""
    BUSY[0] = 0.0
    cpu = time.process_time()
    started = time.perf_counter()
    engine.zero_grad()
    _, _, loss = engine.execute_schedule(iter([batch]))
    engine.step()
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu
    assert loss is not None  # noqa: S101 - a training step always returns its loss
    return Step(elapsed, BUSY[0], cpu, float(loss.detach()))  # float(): after the timing


def pipeline_process(config: PipelineConfig, world: int) -> None:
    """One rank: every (schedule, M) case on `world` ranks, each its own model from the same weights; the warm-up
    steps of every case first, then `repeats` rounds running `steps` steps of each case, in an order shuffled per
    round (alike on every rank). Writes this rank's times, busy times and losses to a JSON file."""
    join_group(config.threads)
    batch = make_batch(config)
    engines: dict[str, ModelEngine] = {}
    record: dict[str, Any] = {"stages": {}, "first_loss": {}, "times": {}, "busy": {}, "cpu": {}, "losses": {}}
    for schedule, m in config.cases:
        key = f"{schedule}/{m}"
        stages = split_stages(make_model(config), split_points(config.blocks, stage_count(schedule, world)))
        pipeline = PipelineSchedule(stages, num_microbatches=m, schedule=schedule)
        local = pipeline.local_model
        engines[key] = ModelEngine(local, torch.optim.SGD(local.parameters(), lr=0.01), nn.MSELoss(), schedule=pipeline)
        record["stages"][key] = pipeline.stage_indices
        for field in ("times", "busy", "cpu", "losses"):
            record[field][key] = []
        for index in range(config.warmup):
            dist.barrier()
            loss = _timed_step(engines[key], batch).loss
            if index == 0:  # before any update: the one process's first loss
                record["first_loss"][key] = loss
    h.freeze_garbage()  # the models and schedules live until the end: the collections before each step stay cheap
    rng = random.Random(config.seed)
    for _, key in h.interleaved(sorted(engines), config.repeats, rng):
        for _ in range(config.steps):
            h.before_run(config.threads)  # a collection now, not inside the step
            dist.barrier()  # every rank starts the step together
            step = _timed_step(engines[key], batch)
            record["times"][key].append(step.seconds)
            record["busy"][key].append(step.slept)
            record["cpu"][key].append(step.cpu)
            record["losses"][key].append(step.loss)
    save(record, config.out_dir, f"world{world}")


def one_process(config: PipelineConfig) -> dict[str, Any]:
    """The baseline: the whole model on the whole batch in this process, the same steps as each pipeline case."""
    model = make_model(config)
    engine = ModelEngine(model, torch.optim.SGD(model.parameters(), lr=0.01), nn.MSELoss())
    batch = make_batch(config)
    first_loss = _timed_step(engine, batch).loss  # before any update: each pipeline's first loss must be this one
    for _ in range(config.warmup - 1):
        _timed_step(engine, batch)
    h.freeze_garbage()
    steps = []
    for _ in range(config.repeats * config.steps):
        h.before_run(config.threads)
        steps.append(_timed_step(engine, batch))
    return {
        "times": [step.seconds for step in steps],
        "busy": [step.slept for step in steps],
        "cpu": [step.cpu for step in steps],
        "first_loss": first_loss,
    }
