"""Running as several processes: the collectives, which rank this is, the decisions all ranks agree on, logging
that knows the rank, pre-emption signals, and ending a process group with the script.

- `collectives`: joining the process group torchrun describes, starting N local processes without torchrun
  (`spawn`), and agreeing on a value across ranks; this package re-exports its names (`tracktrain.distributed.spawn`);
- `ranks`: which process this is (the one place rank-zero-only code asks);
- `boundary`: `Decision`s every rank takes alike, agreed at the loop's boundaries in one exchange (`decide`);
- `logger`: `get_dist_logger`, a logger that prefixes the rank and writes one file a rank;
- `preemption`: SIGTERM/SIGUSR1/Ctrl-C recorded, and `Terminated`, what a fit stopped by one raises;
- `group_exit`: a process group started here ends with the script without aborting a finished process;
- `data`: `get_dataloader`, a DataLoader that shards the dataset across processes;
- `xla`: torch_xla (TPU devices and their replicas), imported on first use only;
- `ignite_api`: Ignite's `ignite.distributed` (`idist`): `get_rank`, `device`, `Parallel`, `auto_model`,
  `auto_dataloader`, `all_reduce`, ...; `import tracktrain.distributed as idist` is Ignite's `idist`.

`import tracktrain.distributed` does not import torch (`ranks`, `logger` and `preemption` work without it); the
collectives' names load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracktrain._lazy import lazy_attributes
from tracktrain.ignite_names import refusal

if TYPE_CHECKING:  # the names' types for mypy (`X as X`: re-exported)
    from tracktrain.distributed.collectives import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT
    from tracktrain.distributed.collectives import START_METHOD_VARIABLE as START_METHOD_VARIABLE
    from tracktrain.distributed.collectives import START_METHODS as START_METHODS
    from tracktrain.distributed.collectives import TIMEOUT_VARIABLE as TIMEOUT_VARIABLE
    from tracktrain.distributed.collectives import AsyncAnyRank as AsyncAnyRank
    from tracktrain.distributed.collectives import all_reduce_tensor as all_reduce_tensor
    from tracktrain.distributed.collectives import any_rank as any_rank
    from tracktrain.distributed.collectives import check_same_on_all_ranks as check_same_on_all_ranks
    from tracktrain.distributed.collectives import collective_device as collective_device
    from tracktrain.distributed.collectives import collective_timeout as collective_timeout
    from tracktrain.distributed.collectives import gather_floats as gather_floats
    from tracktrain.distributed.collectives import gather_objects as gather_objects
    from tracktrain.distributed.collectives import init_from_env as init_from_env
    from tracktrain.distributed.collectives import is_distributed as is_distributed
    from tracktrain.distributed.collectives import rank_zero_value as rank_zero_value
    from tracktrain.distributed.collectives import (
        restarts_share_the_rendezvous_store as restarts_share_the_rendezvous_store,
    )
    from tracktrain.distributed.collectives import spawn as spawn

_LAZY = dict.fromkeys(
    (
        "DEFAULT_TIMEOUT",
        "START_METHOD_VARIABLE",
        "START_METHODS",
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
    ),
    "tracktrain.distributed.collectives",
)
# Ignite's idist names (its spawn is the collectives', which also takes Ignite's form)
IGNITE_NAMES = (
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
    "sync",
)
_LAZY.update(dict.fromkeys(IGNITE_NAMES, "tracktrain.distributed.ignite_api"))

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY, refused=refusal(__name__, "ignite.distributed"))
