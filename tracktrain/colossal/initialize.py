"""Colossal-AI's entry points: `launch` (and `launch_from_torch`, `launch_from_slurm`, `launch_from_openmpi`) loads the
config and joins the process group; `initialize` applies the config's features to the model, optimizer, criterion
and loaders and returns `(engine, train_dataloader, test_dataloader, lr_scheduler)`; `get_default_parser`.

`initialize` applies them in Colossal-AI's order: cuDNN flags; the model to this process's device; with several
data-parallel ranks, its parameters broadcast from the group's first rank; `fp16` (torch AMP: autocast of the
forward and loss, a GradScaler on the backward and step); the model wrapped in DDP (with `torch_ddp`'s arguments)
when data parallel without a pipeline; the schedule (a pipeline over `parallel.pipeline` ranks, `NUM_MICRO_BATCHES`
micro-batches, `model.num_chunks` stages each); `gradient_accumulation` (the engine's calls, the loader, the
scheduler: `tracktrain.colossal.engine.gradient_accumulation`); and the engine with `clip_grad_norm`.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from tracktrain.colossal.context.parallel_context import global_context as gpc
from tracktrain.colossal.context.parallel_mode import ParallelMode
from tracktrain.colossal.engine.gradient_accumulation import Engine, GradAccumDataloader, GradAccumLrSchedulerByStep
from tracktrain.colossal.logging import get_dist_logger
from tracktrain.colossal.utils import get_current_device
from tracktrain.engine.model_engine import BaseOpHook

__all__ = [
    "get_default_parser",
    "initialize",
    "launch",
    "launch_from_openmpi",
    "launch_from_slurm",
    "launch_from_torch",
]

ConfigArgument = str | Path | Mapping[str, Any]


def get_default_parser() -> argparse.ArgumentParser:
    """An argument parser with Colossal-AI's launch options (`--config`, `--host`, `--port`, `--world_size`,
    `--rank`, `--local_rank`, `--backend`), to add the script's own to."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", type=str, help="path to the config file")
    parser.add_argument("--host", type=str, help="the master address for distributed training")
    parser.add_argument("--port", type=int, help="the master port for distributed training")
    parser.add_argument("--world_size", type=int, help="world size for distributed training")
    parser.add_argument("--rank", type=int, help="rank for the default process group")
    parser.add_argument("--local_rank", type=int, help="local rank on the node")
    parser.add_argument("--backend", type=str, default="nccl", help="backend for distributed communication")
    return parser


def launch(
    config: ConfigArgument,
    rank: int,
    world_size: int,
    host: str,
    port: int,
    backend: str = "nccl",
    local_rank: int | None = None,
    seed: int = 1024,
    verbose: bool = True,
) -> None:
    """Load `config` into `gpc.config` (checking its features), join the process group of `world_size` processes
    at `host:port` as `rank`, set up the parallel groups, choose the CUDA device and seed every generator with
    `seed`. Without CUDA, `backend="nccl"` (Colossal-AI's default) becomes gloo, the CPU's backend."""
    if not isinstance(config, (str, Path, Mapping)):
        raise TypeError(
            f"launch(config=...) takes a dict, a Config or the path of a Python config file, got "
            f"{type(config).__name__}: {config!r}."
        )
    gpc.verbose = verbose
    gpc.load_config(config)
    if backend == "nccl" and not torch.cuda.is_available():
        backend = "gloo"
    gpc.init_global_dist(rank, world_size, backend, host, port)
    gpc.init_parallel_groups()
    if torch.cuda.is_available():
        gpc.set_device(local_rank)
    gpc.detect_num_processes_on_current_node()
    gpc.set_seed(seed)
    if verbose:
        get_dist_logger().info(
            f"Distributed environment is initialized, data parallel size: {gpc.data_parallel_size}, pipeline "
            f"parallel size: {gpc.pipeline_parallel_size}, tensor parallel size: {gpc.tensor_parallel_size}",
            ranks=[0],
        )


def _environment(names: Mapping[str, str], launcher: str) -> dict[str, Any]:
    """`launch`'s arguments named by `names` (argument -> environment variable), read from the environment."""
    missing = [variable for variable in names.values() if variable not in os.environ]
    if missing:
        raise RuntimeError(
            f"launch_from_{launcher} reads {list(names.values())} from the environment, but {missing} are not set: "
            f"start the script with {'torchrun --nproc_per_node N train.py' if launcher == 'torch' else launcher}, "
            "or call launch(config, rank, world_size, host, port) with them."
        )
    return {
        key: os.environ[variable] if key == "host" else int(os.environ[variable]) for key, variable in names.items()
    }


def launch_from_torch(config: ConfigArgument, backend: str = "nccl", seed: int = 1024, verbose: bool = True) -> None:
    """`launch` with the rank, local rank, world size, host and port torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT)."""
    names = {"rank": "RANK", "local_rank": "LOCAL_RANK", "world_size": "WORLD_SIZE"}
    found = _environment({**names, "host": "MASTER_ADDR", "port": "MASTER_PORT"}, "torch")
    launch(config, backend=backend, seed=seed, verbose=verbose, **found)


def launch_from_slurm(
    config: ConfigArgument, host: str, port: int, backend: str = "nccl", seed: int = 1024, verbose: bool = True
) -> None:
    """`launch` with the rank and world size SLURM sets (SLURM_PROCID, SLURM_NPROCS)."""
    found = _environment({"rank": "SLURM_PROCID", "world_size": "SLURM_NPROCS"}, "slurm")
    launch(config, host=host, port=port, backend=backend, seed=seed, verbose=verbose, **found)


def launch_from_openmpi(
    config: ConfigArgument, host: str, port: int, backend: str = "nccl", seed: int = 1024, verbose: bool = True
) -> None:
    """`launch` with the rank, local rank and world size OpenMPI sets (OMPI_COMM_WORLD_RANK, ..._LOCAL_RANK,
    ..._SIZE)."""
    names = {
        "rank": "OMPI_COMM_WORLD_RANK",
        "local_rank": "OMPI_COMM_WORLD_LOCAL_RANK",
        "world_size": "OMPI_COMM_WORLD_SIZE",
    }
    found = _environment(names, "openmpi")
    launch(config, host=host, port=port, backend=backend, seed=seed, verbose=verbose, **found)


def initialize(
    model: nn.Module | Callable[[], nn.Module],
    optimizer: torch.optim.Optimizer | Callable[..., torch.optim.Optimizer],
    criterion: Callable | None = None,
    train_dataloader: Iterable[Any] | None = None,
    test_dataloader: Iterable[Any] | None = None,
    lr_scheduler: Any = None,
    ophooks: list[BaseOpHook] | None = None,
    verbose: bool = True,
    **engine_options: Any,
) -> tuple[Engine, Iterable[Any] | None, Iterable[Any] | None, Any]:
    """Apply `gpc.config`'s features (see the module) and return `(engine, train_dataloader, test_dataloader,
    lr_scheduler)`, the loader and scheduler wrapped for gradient accumulation. `model` may be a function building
    the model and `optimizer` a class (or function) taking its parameters, as in Colossal-AI. Without `launch`, the
    config is empty: the engine trains as the objects were given. Extra keyword arguments go to `Engine`
    (`gradient_handlers`, ...)."""
    features = gpc.features
    logger = get_dist_logger()
    if verbose and gpc.config:
        logger.info(
            f"\n========== Your Config ========\n{dict(gpc.config)!r}\n================================", ranks=[0]
        )
    torch.backends.cudnn.benchmark = features.cudnn_benchmark
    torch.backends.cudnn.deterministic = features.cudnn_deterministic
    if not isinstance(model, nn.Module):
        if not callable(model):
            raise TypeError(f"initialize(model=...) takes a torch.nn.Module or a function building one, got {model!r}.")
        model = model()
        if not isinstance(model, nn.Module):
            raise TypeError(f"initialize(model=...) built {model!r}, which is not a torch.nn.Module.")
    model = model.to(get_current_device())
    if not isinstance(optimizer, torch.optim.Optimizer):
        if not callable(optimizer):
            raise TypeError(
                f"initialize(optimizer=...) takes a torch.optim.Optimizer or a class taking the parameters, got "
                f"{optimizer!r}."
            )
        optimizer = optimizer(model.parameters())
    data_parallel = gpc.is_initialized(ParallelMode.DATA) and gpc.get_world_size(ParallelMode.DATA) > 1
    if data_parallel:
        _broadcast_parameters(model)
    precision: dict[str, Any] = {}
    if features.fp16:
        device_type = get_current_device().type
        precision = {
            "autocast_dtype": torch.float16,
            "scaler": torch.amp.GradScaler(device_type, **features.grad_scaler_options),
            "device_type": device_type,
        }
    schedule = None
    if features.pipeline_size > 1:
        model, schedule = _pipeline(model, features.pipeline_size, features.num_microbatches, features.num_chunks)
    elif data_parallel:
        model = nn.parallel.DistributedDataParallel(
            model,
            device_ids=[torch.cuda.current_device()] if torch.cuda.is_available() else None,
            process_group=gpc.get_group(ParallelMode.DATA),
            **features.torch_ddp,
        )
    accumulation = features.gradient_accumulation
    if accumulation > 1:
        if train_dataloader is not None:
            train_dataloader = GradAccumDataloader(train_dataloader, accumulation)
        if lr_scheduler is not None:
            lr_scheduler = GradAccumLrSchedulerByStep(lr_scheduler, accumulation)
    if schedule is not None and data_parallel:
        engine_options.setdefault("gradient_handlers", []).append(_AllReduceOverData(model))
    engine = Engine(
        model,
        optimizer,
        criterion,
        clip_grad_norm=features.clip_grad_norm,
        ophook_list=ophooks,
        verbose=verbose,
        schedule=schedule,
        gradient_accumulation=accumulation,
        **precision,
        **engine_options,
    )
    return engine, train_dataloader, test_dataloader, lr_scheduler


def _broadcast_parameters(model: nn.Module) -> None:
    """The data-parallel group's first rank's parameters and buffers on every rank of it (Colossal-AI's
    `sync_model_param`)."""
    group = gpc.get_group(ParallelMode.DATA)
    source = gpc.get_ranks_in_group(ParallelMode.DATA)[0]
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            dist.broadcast(tensor, src=source, group=group)


def _pipeline(model: nn.Module, stages: int, num_microbatches: int | None, num_chunks: int) -> tuple[nn.Module, Any]:
    """The model cut into `stages * num_chunks` stages of about as many children each (Colossal-AI's uniform
    partition), this rank's kept, run by tracktrain's `PipelineSchedule` (1F1B, interleaved with several stages per
    rank)."""
    from tracktrain.engine.pipeline import PipelineSchedule, split_stages

    if not isinstance(model, nn.Sequential):
        raise TypeError(
            f"parallel.pipeline = {stages} cuts the model given to initialize into stages, which needs an "
            f"nn.Sequential (got {type(model).__name__}); write the model as an nn.Sequential of its blocks."
        )
    count = stages * num_chunks
    names = [name for name, _ in model.named_children()]
    if len(names) < count:
        raise ValueError(
            f"parallel.pipeline = {stages} with model.num_chunks = {num_chunks} needs {count} stages, but the model "
            f"has {len(names)} children."
        )
    per_stage, extra = divmod(len(names), count)
    starts, at = [], 0
    for index in range(count):
        at += per_stage + (1 if index < extra else 0)
        starts.append(at)
    split_points = [names[start] for start in starts[:-1]]
    schedule = PipelineSchedule(
        split_stages(model, split_points),
        num_microbatches=num_microbatches or 1,
        schedule="interleaved_1f1b" if num_chunks > 1 else "1f1b",
        group=gpc.get_group(ParallelMode.PIPELINE),
    )
    return schedule.local_model, schedule


class _AllReduceOverData:
    """Averages the gradients over the data-parallel group (Colossal-AI's `DataParallelGradientHandler`, which its
    `initialize` adds for data parallelism across pipelines)."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def handle_gradient(self) -> None:
        group, size = gpc.get_group(ParallelMode.DATA), gpc.get_world_size(ParallelMode.DATA)
        for parameter in self.model.parameters():
            if parameter.grad is not None:
                dist.all_reduce(parameter.grad, group=group)
                parameter.grad.div_(size)
