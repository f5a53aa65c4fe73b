"""Ignite's `ignite.distributed` (`idist`) on tracktrain's distributed layer, reached as `tracktrain.distributed`:
the same script runs on one process or on N (`torchrun`, or `Parallel(backend=..., nproc_per_node=N)`).

- which process this is: `get_rank`, `get_world_size`, `get_local_rank`, `get_nproc_per_node`, `get_node_rank`,
  `get_nnodes`, `hostname`, `device`, `backend`, `model_name`, `available_backends`, `show_config`;
- the process group: `initialize(backend)` (torchrun's environment, as `init_from_env`), `finalize`, `Parallel`
  (a context manager that initializes it, or spawns N processes with `spawn`);
- collectives: `all_reduce`, `all_gather`, `broadcast`, `barrier`, `new_group`, `one_rank_only`, `one_rank_first`;
- `auto_model` (the device, then DistributedDataParallel across processes, DataParallel across local GPUs),
  `auto_dataloader` (each process's share: batch size and workers divided, a DistributedSampler),
  `auto_optim`, `DistributedProxySampler`.

Only torch.distributed's native backends ("gloo", "nccl", "mpi") are taken; Horovod is not offered
(`has_hvd_support` is False) and XLA runs through the Trainer's `strategy="xla"`. `spawn` is this package's own
`spawn(fn, nprocs)`, which also takes Ignite's form `spawn(backend, fn, args, kwargs_dict, nproc_per_node=N)`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import inspect
import logging
import numbers
import os
import socket
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset, Sampler

import tracktrain.distributed.collectives as collectives
from tracktrain.distributed.ranks import local_rank, rank_and_world_size

__all__ = [
    "DistributedProxySampler",
    "Parallel",
    "all_gather",
    "all_reduce",
    "auto_dataloader",
    "auto_model",
    "auto_optim",
    "available_backends",
    "backend",
    "barrier",
    "broadcast",
    "device",
    "finalize",
    "get_local_rank",
    "get_nnodes",
    "get_node_rank",
    "get_nproc_per_node",
    "get_rank",
    "get_world_size",
    "has_hvd_support",
    "has_native_dist_support",
    "has_xla_support",
    "hostname",
    "initialize",
    "model_name",
    "new_group",
    "one_rank_first",
    "one_rank_only",
    "set_local_rank",
    "show_config",
    "spawn",
    "sync",
]

NATIVE_BACKENDS = ("nccl", "gloo", "mpi")
has_native_dist_support = dist.is_available()
"""Whether this torch build has torch.distributed."""


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a finder that refuses it, a half-installed package
        return False


has_xla_support = _installed("torch_xla")
"""Whether torch_xla is installed (XLA runs through the Trainer's strategy="xla")."""
has_hvd_support = False
"""Always False: Horovod is not offered (torch.distributed's native backends cover what it does)."""

_logger = logging.getLogger(__name__)
_local_rank_override: int | None = None


def _running() -> bool:
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    """This process's rank among all the job's processes (0 alone)."""
    return rank_and_world_size()[0]


def get_world_size() -> int:
    """How many processes the job has (1 alone)."""
    return rank_and_world_size()[1]


def get_local_rank() -> int:
    """This process's rank on its machine (LOCAL_RANK; 0 alone)."""
    return local_rank() if _local_rank_override is None else _local_rank_override


def set_local_rank(index: int) -> None:
    """This process's local rank where the launcher does not say (no LOCAL_RANK), as Ignite's."""
    global _local_rank_override
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"set_local_rank: index must be an int >= 0, got {index!r}.")
    _local_rank_override = index


def get_nproc_per_node() -> int:
    """How many processes run on each machine."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", get_world_size() if get_nnodes() == 1 else 1))


def get_nnodes() -> int:
    """How many machines the job runs on (torchrun's nodes)."""
    return int(os.environ.get("GROUP_WORLD_SIZE", os.environ.get("NNODES", "1")))


def get_node_rank() -> int:
    """This machine's rank among the job's machines."""
    return int(os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", "0")))


def hostname() -> str:
    """This machine's name."""
    return socket.gethostname()


def backend() -> str | None:
    """The running process group's backend ("gloo", "nccl", ...), None without one."""
    return str(dist.get_backend()) if _running() else None


def model_name() -> str:
    """Ignite's name of the computation model: "native-dist" with a process group, else "serial"."""
    return "native-dist" if _running() else "serial"


def available_backends() -> tuple[str, ...]:
    """The native backends this torch build has."""
    if not dist.is_available():
        return ()
    checks = {"nccl": dist.is_nccl_available, "gloo": dist.is_gloo_available, "mpi": dist.is_mpi_available}
    return tuple(name for name in NATIVE_BACKENDS if checks[name]())


def device() -> torch.device:
    """This process's device: the current CUDA device when there is one (`initialize` makes it the local rank's
    under nccl), else the CPU."""
    if torch.cuda.is_available():
        return torch.device(f"cuda:{torch.cuda.current_device()}")
    return torch.device("cpu")


def _check_backend(name: Any) -> str:
    if name not in available_backends():
        raise ValueError(
            f"Unknown backend '{name}'. Available backends: {available_backends()} (Horovod and XLA's are not "
            "offered here: use a native backend, or the Trainer's strategy='xla')."
        )
    return name


def initialize(backend: str, **kwargs: Any) -> None:
    """Join the process group torchrun's environment describes, with `backend` (Ignite's `idist.initialize`);
    `timeout` may be given. Other keyword arguments (`init_method`, `rank`, `world_size`) are refused: torchrun's
    environment says them."""
    _check_backend(backend)
    timeout = kwargs.pop("timeout", None)
    if kwargs:
        raise TypeError(
            f"initialize got {sorted(kwargs)}: the process group is joined from torchrun's environment (RANK, "
            "WORLD_SIZE, MASTER_ADDR, MASTER_PORT); start the script with torchrun, or use Parallel(backend, "
            "nproc_per_node=N)."
        )
    collectives.init_from_env(backend, timeout)
    if backend == "nccl":
        torch.cuda.set_device(get_local_rank())


def finalize() -> None:
    """Leave the process group (nothing without one)."""
    if _running():
        dist.destroy_process_group()


def show_config() -> None:
    """Log the distributed configuration, as Ignite's."""
    _logger.info(
        "distributed configuration: %s; backend: %s; device: %s; hostname: %s; world size: %d; rank: %d; local "
        "rank: %d; processes per node: %d; nodes: %d; node rank: %d",
        model_name(),
        backend(),
        device().type,
        hostname(),
        get_world_size(),
        get_rank(),
        get_local_rank(),
        get_nproc_per_node(),
        get_nnodes(),
        get_node_rank(),
    )


def barrier() -> None:
    """Wait until every process gets here (nothing alone)."""
    if _running():
        dist.barrier()


def sync(temporary: bool = False) -> None:
    """Ignite re-reads the computation model; tracktrain asks torch.distributed every time: nothing to do."""


def new_group(ranks: list[int], **kwargs: Any) -> Any:
    """A process group of `ranks` (torch.distributed.new_group); the list itself without a process group."""
    if not (isinstance(ranks, list) and all(isinstance(rank, int) for rank in ranks)):
        raise ValueError(f"Argument ranks should be list of int, got {ranks!r}")
    return dist.new_group(ranks=ranks, **kwargs) if _running() else ranks


_OPS = {"SUM": "sum", "MAX": "max", "MIN": "min"}


def _group(group: Any) -> Any:
    return dist.new_group(ranks=group) if isinstance(group, list) else group


def all_reduce(tensor: torch.Tensor | float, op: str = "SUM", group: Any = None) -> torch.Tensor | float:
    """`tensor` (or a number) reduced over the processes by "SUM", "PRODUCT", "MIN", "MAX", "AND" or "OR"."""
    operations = ("SUM", "PRODUCT", "MIN", "MAX", "AND", "OR")
    if op not in operations:
        raise ValueError(f"Unsupported reduction operation: '{op}'; use one of {operations}.")
    if not _running() or get_world_size() == 1:
        return tensor
    value = torch.as_tensor(tensor, device=collectives.collective_device())
    reduced = value.clone() if op not in ("AND", "OR") else value.to(torch.uint8)
    reduce_op = {"AND": dist.ReduceOp.MIN, "OR": dist.ReduceOp.MAX}.get(op, getattr(dist.ReduceOp, op))
    dist.all_reduce(reduced, op=reduce_op, group=_group(group))
    if isinstance(tensor, torch.Tensor):
        return reduced.to(device=tensor.device, dtype=tensor.dtype)
    return reduced.item()


def all_gather(tensor: Any, group: Any = None) -> Any:
    """Every process's `tensor` (concatenated along the first dimension), number (a list) or string / object (a
    list), in rank order."""
    if not _running() or get_world_size() == 1:
        return tensor if isinstance(tensor, torch.Tensor) else [tensor]
    if isinstance(tensor, torch.Tensor):
        local = tensor.to(collectives.collective_device())
        local = local.unsqueeze(0) if local.ndim == 0 else local
        gathered = [torch.empty_like(local) for _ in range(get_world_size())]
        dist.all_gather(gathered, local, group=_group(group))
        return torch.cat(gathered).to(tensor.device)
    return collectives.gather_objects(tensor, group=_group(group))


def broadcast(tensor: Any, src: int = 0, safe_mode: bool = False) -> Any:
    """`src`'s tensor, number or string on every process; with `safe_mode`, the other ranks may pass None."""
    if not (isinstance(tensor, (torch.Tensor, numbers.Number, str, os.PathLike)) or tensor is None):
        raise TypeError(f"Unhandled input type {type(tensor)}: broadcast takes a tensor, a number or a string.")
    if not _running() or get_world_size() == 1:
        if tensor is None:
            raise ValueError("Argument tensor should not be None if not in distributed mode or safe_mode is False.")
        return tensor
    if tensor is None and not safe_mode:
        raise ValueError("Argument tensor should not be None if safe_mode is False (pass safe_mode=True).")
    if isinstance(tensor, torch.Tensor) and not safe_mode:
        buffer = tensor.to(collectives.collective_device())
        dist.broadcast(buffer, src=src)
        return buffer.to(tensor.device)
    box = [tensor]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def one_rank_only(rank: int = 0, with_barrier: bool = False) -> Callable[[Callable], Callable]:
    """A decorator: the function runs on `rank` only (then every rank waits for it, with `with_barrier`)."""

    def decorator(function: Callable) -> Callable:
        @functools.wraps(function)
        def run_on_one(*args: Any, **kwargs: Any) -> Any:
            result = function(*args, **kwargs) if get_rank() == rank else None
            if with_barrier:
                barrier()
            return result

        return run_on_one

    return decorator


@contextlib.contextmanager
def one_rank_first(rank: int = 0, local: bool = False) -> Iterator[None]:
    """The block runs on `rank` (the local one with `local`) first, then on the others (a dataset's download)."""
    current = get_local_rank() if local else get_rank()
    size = get_nproc_per_node() if local else get_world_size()
    if not 0 <= rank < size:
        raise ValueError(f"rank should be between 0 and {size - 1}, but given {rank}")
    if current != rank:
        barrier()
    yield
    if current == rank:
        barrier()


# ---------------------------------------------------------------------------------------------- spawning
spawn = collectives.spawn  # ours, which takes Ignite's form spawn(backend, fn, args, kwargs_dict, nproc_per_node) too


class Parallel:
    """Ignite's launcher: `with Parallel(backend=...) as parallel: parallel.run(training, config)` calls
    `training(local_rank, config)` on every process.

    - `backend=None`: one process, no process group;
    - `backend` only: the processes torchrun started (the group is joined on entering, left on exiting);
    - `backend` and `nproc_per_node`: that many processes are spawned here by `run`.
    """

    def __init__(
        self,
        backend: str | None = None,
        nproc_per_node: int | None = None,
        nnodes: int | None = None,
        node_rank: int | None = None,
        master_addr: str | None = None,
        master_port: int | None = None,
        init_method: str | None = None,
        **spawn_kwargs: Any,
    ) -> None:
        if backend is not None:
            _check_backend(backend)
        else:
            for name, value in (
                ("nproc_per_node", nproc_per_node),
                ("nnodes", nnodes),
                ("node_rank", node_rank),
                ("master_addr", master_addr),
                ("master_port", master_port),
            ):
                if value is not None:
                    raise ValueError(f"If backend is None, argument '{name}' should be also None, but given {value}")
        if init_method is not None and init_method.startswith("tcp://"):
            raise ValueError(
                f"TCP initialization via init_method='{init_method}' will hang. To fix this, please configure "
                "MASTER_ADDR and MASTER_PORT in the environment and use 'env://' (or omit init_method)."
            )
        if nproc_per_node is not None and (
            isinstance(nproc_per_node, bool) or not isinstance(nproc_per_node, int) or nproc_per_node < 1
        ):
            raise ValueError(f"Argument nproc_per_node should positive, but given {nproc_per_node}")
        self.backend = backend
        self.init_method = init_method
        self._spawn: dict[str, Any] | None = None
        if backend is not None and nproc_per_node is not None:
            self._spawn = dict(
                nproc_per_node=nproc_per_node,
                nnodes=nnodes or 1,
                node_rank=node_rank or 0,
                master_port=master_port,
                **spawn_kwargs,
            )
        self._logger = logging.getLogger(f"{__name__}.Parallel")

    def run(self, func: Callable, *args: Any, **kwargs: Any) -> None:
        """`func(local_rank, *args, **kwargs)` on every process."""
        if self._spawn is not None and self.backend is not None:
            self._logger.info("Spawn function '%s' in %d processes", func, self._spawn["nproc_per_node"])
            spawn(self.backend, func, args, kwargs_dict=kwargs, **self._spawn)
        else:
            self._logger.info("- Run '%s' in %d processes", func, get_world_size())
            func(get_local_rank(), *args, **kwargs)
        self._logger.info("End of run")

    def __enter__(self) -> Parallel:
        if self.backend is not None and self._spawn is None:
            initialize(self.backend)
            self._logger.info("Initialized processing group with backend: '%s'", self.backend)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self.backend is not None and self._spawn is None:
            self._logger.info("Finalized processing group with backend: '%s'", self.backend)
            finalize()


# ------------------------------------------------------------------------------------- auto_* helpers
def auto_model(model: nn.Module, sync_bn: bool = False, **kwargs: Any) -> nn.Module:
    """`model` on this process's `device()`; across processes wrapped in DistributedDataParallel (its batch norms
    synchronized with `sync_bn`; `kwargs` go to DDP), across this machine's GPUs without a process group in
    DataParallel."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"auto_model needs a torch.nn.Module, got {type(model).__name__}.")
    unknown = set(kwargs) - set(inspect.signature(nn.parallel.DistributedDataParallel).parameters)
    if unknown:  # checked alone too: DistributedDataParallel would refuse them on more processes
        raise TypeError(f"auto_model got arguments DistributedDataParallel does not take: {sorted(unknown)}.")
    target = device()
    if not all(parameter.device == target for parameter in model.parameters()):
        model.to(target)
    if get_world_size() > 1 and _running():
        if sync_bn:
            model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
        if torch.cuda.is_available():
            if "device_ids" in kwargs:
                raise ValueError(f"Argument kwargs should not contain 'device_ids', but got {kwargs}")
            kwargs["device_ids"] = [get_local_rank()]
        return nn.parallel.DistributedDataParallel(model, **kwargs)
    if torch.cuda.device_count() > 1 and target.type == "cuda":
        return nn.parallel.DataParallel(model, **kwargs)
    return model


def auto_optim(optimizer: torch.optim.Optimizer, **kwargs: Any) -> torch.optim.Optimizer:
    """`optimizer` as it is: with native backends, DistributedDataParallel already averages the gradients."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"auto_optim needs a torch.optim.Optimizer, got {type(optimizer).__name__}.")
    if kwargs:
        raise TypeError(f"auto_optim got {sorted(kwargs)}: they are Horovod's, which is not offered here.")
    return optimizer


def auto_dataloader(dataset: Dataset, **kwargs: Any) -> DataLoader:
    """A DataLoader of this process's share: across processes the batch size and the workers are divided by the
    number of processes, and a sampler given (or shuffling) becomes a distributed one; `pin_memory` defaults to
    whether the device is a GPU."""
    rank, world_size = get_rank(), get_world_size()
    if world_size > 1:
        if kwargs.get("batch_size", 0) >= world_size:
            kwargs["batch_size"] //= world_size
        processes = get_nproc_per_node()
        if kwargs.get("num_workers", 0) >= processes:
            kwargs["num_workers"] = (kwargs["num_workers"] + processes - 1) // processes
        if "batch_sampler" in kwargs:
            warnings.warn(
                "Found batch_sampler in provided kwargs. Please, make sure that it is compatible with distributed "
                "configuration",
                stacklevel=2,
            )
        elif isinstance(dataset, IterableDataset):
            _logger.info(
                "Found iterable dataset, dataloader will be created without any distributed sampling. Please, make "
                "sure that the dataset itself produces different data on different ranks."
            )
        else:
            sampler = kwargs.get("sampler")
            if isinstance(sampler, DistributedSampler):
                if sampler.rank != rank or sampler.num_replicas != world_size:
                    warnings.warn(
                        f"Found distributed sampler with rank={sampler.rank} and num_replicas={sampler.num_replicas}, "
                        f"but process rank is {rank} of {world_size}",
                        stacklevel=2,
                    )
            elif sampler is None:
                sampler = DistributedSampler(
                    dataset, num_replicas=world_size, rank=rank, shuffle=kwargs.pop("shuffle", True)
                )
            else:
                sampler = DistributedProxySampler(sampler, num_replicas=world_size, rank=rank)
            kwargs["sampler"] = sampler
    kwargs.setdefault("pin_memory", device().type == "cuda")
    return DataLoader(dataset, **kwargs)


class DistributedProxySampler(DistributedSampler):
    """Any sampler (with a length) shared across processes: each takes every `num_replicas`-th of its indices;
    `set_epoch(epoch)` seeds torch with the epoch before drawing them, as Ignite's, so every process draws alike."""

    def __init__(self, sampler: Sampler, num_replicas: int | None = None, rank: int | None = None) -> None:
        if not isinstance(sampler, Sampler):
            raise TypeError(f"Argument sampler should be instance of torch Sampler, but given: {type(sampler)}")
        if isinstance(sampler, DistributedSampler):
            raise TypeError("Argument sampler must not be a distributed sampler already")
        if not hasattr(sampler, "__len__"):
            raise TypeError("Argument sampler should have length")
        super().__init__(sampler, num_replicas=num_replicas, rank=rank, shuffle=False)  # type: ignore[arg-type]
        self.sampler = sampler

    def __iter__(self) -> Iterator[int]:
        torch.manual_seed(self.epoch)
        indices: list[int] = []
        while len(indices) < self.total_size:
            indices += list(self.sampler)
        indices = indices[: self.total_size][self.rank : self.total_size : self.num_replicas]
        if len(indices) != self.num_samples:
            raise RuntimeError(f"{len(indices)} vs {self.num_samples}")
        return iter(indices)
