"""torch.distributed for the Trainer: joining the process group torchrun describes, starting N local processes
without torchrun, and agreeing on a decision across ranks."""

from __future__ import annotations

import os
import socket
import sys
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

# not `from tracktrain.distributed import ...`: the package's __init__ re-exports this module (no import circle)
import tracktrain.distributed.group_exit as group_exit
import tracktrain.distributed.lost_ranks as lost_ranks
from tracktrain.checks.environment import positive_setting

__all__ = [  # all public: `tracktrain.distributed` re-exports each of them
    "DEFAULT_TIMEOUT",
    "START_METHODS",
    "START_METHOD_VARIABLE",
    "TIMEOUT_VARIABLE",
    "AsyncAnyRank",
    "all_reduce_tensor",
    "any_rank",
    "check_same_on_all_ranks",
    "collective_device",
    "collective_timeout",
    "gather_floats",
    "gather_objects",
    "init_from_env",
    "is_distributed",
    "rank_zero_value",
    "restarts_share_the_rendezvous_store",
    "spawn",
]

_TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def is_distributed() -> bool:
    """Whether a process group of more than one process is running."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


TIMEOUT_VARIABLE = "TRACKTRAIN_DIST_TIMEOUT"
"""The environment variable that sets `collective_timeout`'s default, in seconds (tests set a few, so that a hang
fails fast)."""
DEFAULT_TIMEOUT = timedelta(minutes=30)
"""How long a collective waits for the other ranks when neither `timeout=` nor `TRACKTRAIN_DIST_TIMEOUT` says."""


def collective_timeout(timeout: timedelta | None = None) -> timedelta:
    """How long a collective may wait for the other ranks before the run fails (on every rank, each with its own
    stack): `timeout` if given, else `TRACKTRAIN_DIST_TIMEOUT` seconds, else 30 minutes (a first CUDA compile or a
    checkpoint written to a slow store can take minutes; a test sets seconds, so a hang fails fast)."""
    if timeout is not None:
        return timeout
    return timedelta(seconds=positive_setting(TIMEOUT_VARIABLE, DEFAULT_TIMEOUT.total_seconds(), float, "seconds"))


def init_from_env(backend: str | None = None, timeout: timedelta | None = None) -> None:
    """Join the process group torchrun (or `spawn`) describes in RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT;
    nothing to do when one is running already. `backend` defaults to nccl with CUDA, gloo without; `timeout`: see
    `collective_timeout`."""
    if dist.is_initialized():
        return
    timeout = collective_timeout(timeout)
    missing = [name for name in _TORCHRUN_VARIABLES if name not in os.environ]
    if missing:
        raise RuntimeError(
            f"A strategy over several processes (ddp, fsdp, tensor parallel) needs the process group torchrun "
            f"describes, but {missing} are not set. Start the script "
            "with `torchrun --nproc_per_node N train.py`, or from Python with tracktrain.distributed.spawn(fn, N)."
        )
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if os.environ.get("RANK") == "0" and restarts_share_the_rendezvous_store(os.environ):
        warnings.warn(
            "torchrun restarts ranks on several nodes (--max-restarts "
            f"{os.environ['TORCHELASTIC_MAX_RESTARTS']}, {os.environ['GROUP_WORLD_SIZE']} nodes) through the "
            "rendezvous store it shares with them, which can hang or refuse connections after a restart (PyTorch "
            "issue 135712). Start torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in its environment on every "
            "node, e.g. `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --nnodes 2 ...`.",
            stacklevel=2,
        )
    group_exit.before_init()
    dist.init_process_group(backend, timeout=timeout)
    group_exit.end_at_a_clean_exit()
    lost_ranks.note_peers()  # so that a survivor can name a rank that is lost


def restarts_share_the_rendezvous_store(environment: Mapping[str, str]) -> bool:
    """Whether torchrun (as `environment`, a rank's, says) restarts ranks of several nodes with the rendezvous
    store its agent shares with them: the setting of PyTorch issue 135712, which TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
    on the launchers avoids (the agents then tell their ranks TORCHELASTIC_USE_AGENT_STORE=False)."""
    try:
        restarts = int(environment.get("TORCHELASTIC_MAX_RESTARTS", "0"))
        nodes = int(environment.get("GROUP_WORLD_SIZE", "1"))
    except ValueError:
        return False
    return restarts > 0 and nodes > 1 and environment.get("TORCHELASTIC_USE_AGENT_STORE") == "True"


def collective_device() -> torch.device:
    """Where the tensors of a collective live: nccl reduces CUDA tensors only; gloo (and the rest) take CPU ones."""
    if "nccl" in str(dist.get_backend()):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def any_rank(flag: bool) -> bool:
    """`flag` or-ed over all processes (every rank must call it): one rank's decision to stop or save becomes
    everyone's, so no rank is left waiting in a collective the others skipped."""
    if not is_distributed():
        return flag
    buffer = torch.tensor([int(flag)], device=collective_device())
    dist.all_reduce(buffer, op=dist.ReduceOp.MAX)
    return bool(buffer.item())


class AsyncAnyRank:
    """`any_rank` without waiting: `exchange(value)` returns the maximum over ranks of the values given to the
    previous call, and sends this one. Called at the same steps by every rank, it makes all ranks act on a flag at
    the same step, one exchange after any rank raised it, for the cost of a collective that overlaps the steps."""

    def __init__(self) -> None:
        self._buffer: torch.Tensor | None = None
        self._work: Any = None

    def exchange(self, value: int) -> int:
        """Send this rank's `value` (every rank must call it at the same step) and return the maximum over ranks of
        the values of the previous call (0 at the first), waiting only for that earlier exchange."""
        agreed = self.finish()
        if self._buffer is None:  # one buffer for the whole run: no allocation per step
            self._buffer = torch.zeros(1, dtype=torch.int64, device=collective_device())
        self._buffer.fill_(value)
        self._work = dist.all_reduce(self._buffer, op=dist.ReduceOp.MAX, async_op=True)
        return agreed

    def finish(self) -> int:
        """Wait for the exchange in flight (before the process group is used otherwise, or torn down)."""
        if self._work is None:
            return 0
        self._work.wait()
        self._work = None
        return int(self._buffer.item())  # type: ignore[union-attr]


def rank_zero_value(value: Any, group: dist.ProcessGroup | None = None) -> Any:
    """Rank 0's `value` on every rank (every rank must call it), so that a decision taken from it is the same on
    all of them; `value` itself without a process group. `group`: a group of all ranks other than the default."""
    if not is_distributed():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0, group=group)
    return box[0]


def gather_objects(value: Any, group: dist.ProcessGroup | None = None) -> list[Any]:
    """`value` from every rank, in rank order, on every rank (every rank must call it); `[value]` alone. `group`: a
    group of all ranks other than the default."""
    if not is_distributed():
        return [value]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value, group=group)
    return gathered


def gather_floats(values: Sequence[float]) -> list[list[float]]:
    """Every rank's `values` (the same number on each), in rank order, on every rank, in one all-gather of a float64
    tensor (every rank must call it); `[values]` alone."""
    if not is_distributed():
        return [list(values)]
    local = torch.tensor(list(values), dtype=torch.float64, device=collective_device())
    gathered = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, local)
    return [row.tolist() for row in gathered]


_REDUCE_OPS = ("sum", "max", "min")  # dist.ReduceOp's names, looked up when used (a build may lack distributed)


def all_reduce_tensor(value: torch.Tensor, op: str) -> torch.Tensor:
    """`value` reduced over all processes by `op` ("sum", "max" or "min"), in float64 on the collective's device,
    given back in `value`'s shape, dtype and device (every rank must call it); `value` itself alone."""
    if op not in _REDUCE_OPS:
        raise ValueError(f"all_reduce_tensor(op=...) must be one of {_REDUCE_OPS}, got {op!r}.")
    if not is_distributed():
        return value
    buffer = value.detach().to(device=collective_device(), dtype=torch.float64).reshape(-1)
    dist.all_reduce(buffer, op=getattr(dist.ReduceOp, op.upper()))
    return buffer.reshape(value.shape).to(device=value.device, dtype=value.dtype)


def check_same_on_all_ranks(what: str, value: int) -> None:
    """Raise on every rank unless all ranks hold the same `value` (every rank must call it)."""
    if not is_distributed():
        return
    values = [torch.zeros(1, dtype=torch.int64, device=collective_device()) for _ in range(dist.get_world_size())]
    dist.all_gather(values, torch.tensor([value], dtype=torch.int64, device=collective_device()))
    seen = [int(v.item()) for v in values]
    if len(set(seen)) > 1:
        raise RuntimeError(
            f"The ranks disagree on the {what}: {seen} (by rank). Every rank must load the same checkpoint: "
            "use a checkpoint directory all ranks read (a shared disk or an object store URL)."
        )


START_METHOD_VARIABLE = "TRACKTRAIN_START_METHOD"
"""The environment variable that sets `spawn`'s default `start_method` ("spawn" when it is not set)."""
START_METHODS = ("spawn", "forkserver")
"""The start methods `spawn` takes: "spawn" (each process from scratch) or "forkserver" (forked from a server
process that imported torch once)."""
_FAILURE_GRACE_SECONDS = 10.0  # how long the other ranks may take to fail on their own once one has


def spawn(
    fn: Callable[..., Any] | str,
    nprocs: Any = None,
    args: tuple = (),
    master_port: int | None = None,
    start_method: str | None = None,
    **ignite_form: Any,
) -> None:
    """Run `fn(*args)` in `nprocs` local processes set up as torchrun would (RANK, LOCAL_RANK, WORLD_SIZE,
    MASTER_ADDR=127.0.0.1, a free MASTER_PORT), so `Trainer(strategy="ddp")` works inside without torchrun.

    Ignite's form is taken too: `spawn(backend, fn, args, kwargs_dict=None, nproc_per_node=1)` runs
    `fn(local_rank, *args, **kwargs_dict)` in `nproc_per_node` processes, each already in `backend`'s process group
    (`tracktrain.distributed` is Ignite's `idist`); processes on several machines are torchrun's to start.
    An exception in any process stops the others (after 10 s in which they may fail on their own, each printing its
    stack: a hang times out on every rank; then SIGTERM, and SIGKILL 10 s later) and is raised here. `fn` must be
    importable (defined at a module's top level).

    `start_method` (default: $TRACKTRAIN_START_METHOD, else "spawn"): "spawn" starts each process from scratch, so
    each imports torch again (~1-2 s of CPU per rank); "forkserver" forks them from a server process started once,
    which imported torch, tracktrain and `fn`'s module, so later calls start ranks in a fraction of that. Either
    way every process sees this process's environment as it is at the call; but what is read only as a process
    starts (MALLOC_* settings, LD_PRELOAD) keeps the server's values under "forkserver": use "spawn" for those."""
    if isinstance(fn, str):
        fn, nprocs, args = _ignite_form(fn, nprocs, args, ignite_form)
    elif ignite_form:
        raise TypeError(f"spawn got arguments it does not take: {sorted(ignite_form)}.")
    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"spawn(nprocs=...) must be a positive integer, got {nprocs!r}.")
    if start_method is None:
        start_method = os.environ.get(START_METHOD_VARIABLE, "spawn")
    if start_method not in START_METHODS:
        raise ValueError(
            f"spawn(start_method={start_method!r}) (or ${START_METHOD_VARIABLE}) must be one of {START_METHODS}: "
            '"spawn" starts each process from scratch, "forkserver" forks it from a server that imported torch once.'
        )
    port = master_port if master_port is not None else _free_port()
    import multiprocessing

    from torch.multiprocessing.spawn import start_processes

    if start_method == "forkserver":  # what the server imports once (read when it starts: the first call's)
        multiprocessing.set_forkserver_preload(["torch", "tracktrain.trainer", fn.__module__])
    environment = dict(os.environ)  # a forked process has the server's, from its start: it gets this one's instead
    ranks = start_processes(
        _run_as_rank, args=(nprocs, port, fn, args, environment), nprocs=nprocs, join=False, start_method=start_method
    )
    assert ranks is not None  # join=False returns the processes' context
    # after a rank fails, the others get a moment before they are stopped: a hang times out on every rank at about the
    # same time (the process group's timeout), and each one's stack, printed as it fails, shows where it waited
    while not ranks.join(grace_period=_FAILURE_GRACE_SECONDS):
        pass


def _ignite_form(backend: str, fn: Any, args: tuple, options: dict[str, Any]) -> tuple[Callable[..., Any], int, tuple]:
    """Ignite's `spawn(backend, fn, args, kwargs_dict, nproc_per_node, nnodes, node_rank)` as ours: the function
    each process runs, how many, its arguments."""
    kwargs_dict = options.pop("kwargs_dict", None) or {}
    nproc_per_node = options.pop("nproc_per_node", 1)
    nnodes, node_rank = options.pop("nnodes", 1), options.pop("node_rank", 0)
    options.pop("master_addr", None)  # the processes are local: 127.0.0.1
    if options.pop("init_method", None) is not None:
        raise ValueError("spawn(init_method=...): the processes meet at MASTER_ADDR/MASTER_PORT, set by spawn.")
    if options:
        raise TypeError(f"spawn got arguments it does not take: {sorted(options)}.")
    if nnodes != 1 or node_rank != 0:
        raise ValueError(
            f"spawn(nnodes={nnodes}, node_rank={node_rank}): processes on several machines are started by torchrun "
            "(`torchrun --nnodes N --node_rank R ...`), each script joining the group (idist.initialize(backend))."
        )
    if not callable(fn):
        raise TypeError(f"spawn(backend, fn, ...): fn must be callable, got {fn!r}.")
    return _run_in_group, nproc_per_node, (backend, fn, tuple(args), dict(kwargs_dict))


def _run_in_group(backend: str, fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> None:
    init_from_env(backend)
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    fn(int(os.environ["LOCAL_RANK"]), *args, **kwargs)


def _run_as_rank(
    rank: int, world_size: int, port: int, fn: Callable[..., Any], args: tuple, environment: dict[str, str]
) -> None:
    os.environ.clear()
    os.environ.update(environment)
    os.environ.update(
        {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world_size),
            "LOCAL_WORLD_SIZE": str(world_size),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
    )
    try:
        fn(*args)
    except BaseException:
        # spawn raises the first failing rank's error and stops the others; print every rank's own stack as it
        # fails, so a hang that timed out on both shows where each one waited
        print(f"[rank {rank}] failed:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        raise
    if dist.is_initialized():
        # every rank leaves together: a rank tearing its connections down while another still finishes its fit
        # (rank 0 writing the last checkpoint) can abort that one. (After an exception, spawn stops the others.)
        dist.barrier()
        dist.destroy_process_group()
    # Leave without running C++ static destructors: under load, torch's process-group threads can still be
    # joinable at interpreter exit, which aborts the process ("terminate called without an active exception")
    # although its work is done. Everything the rank wrote is closed; its output streams are flushed here.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
