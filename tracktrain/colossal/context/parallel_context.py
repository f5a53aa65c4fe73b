"""`ParallelContext`: Colossal-AI's global context (`gpc`): the config `launch` loaded, and this process's rank, world
size and process group in each `ParallelMode`, on torch.distributed's process group (`tracktrain.distributed`).

Ranks are laid out as Colossal-AI lays them: with `P` pipeline stages and `D = world_size / P` data-parallel
replicas, rank `r` is stage `r % P` of replica `r // P`; its pipeline group is the `P` consecutive ranks of its
replica, its data group the `D` ranks holding the same stage (`r % P`, `r % P + P`, ...). The model group (tensor x
pipeline) is the pipeline group, and the tensor group is the rank alone, since a tensor-parallel size above 1 is
refused (`features`). Before `launch`, nothing is initialized but the config a script may still set
(`gpc.load_config`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist

from tracktrain.colossal.context.config import Config
from tracktrain.colossal.context.features import Features, read_features
from tracktrain.colossal.context.parallel_mode import ParallelMode

__all__ = ["ParallelContext", "global_context"]


class _Group:
    """One parallel mode's view of this process: its rank in the group, the group's size, ranks and process group."""

    def __init__(self, ranks: list[int], global_rank: int, group: dist.ProcessGroup | None) -> None:
        self.ranks = ranks
        self.local_rank = ranks.index(global_rank)
        self.world_size = len(ranks)
        self.group = group


class ParallelContext:
    """Colossal-AI's `gpc`: `config`, and `get_global_rank()`, `get_local_rank(mode)`, `get_world_size(mode)`,
    `get_group(mode)`, `get_ranks_in_group(mode)`, `is_first_rank(mode)`, `is_last_rank(mode)`,
    `get_next_global_rank(mode)`, `get_prev_global_rank(mode)`, `is_initialized(mode)`, and the sizes
    `data_parallel_size`, `pipeline_parallel_size`, `tensor_parallel_size`."""

    def __init__(self) -> None:
        self._config = Config()
        self._features = Features()
        self._groups: dict[ParallelMode, _Group] = {}
        self.verbose = False
        self.world_size = 1
        self.data_parallel_size = 1
        self.pipeline_parallel_size = 1
        self.tensor_parallel_size = 1
        self.num_processes_on_current_node = 1

    # ------------------------------------------------------------------------------------------------- config
    @property
    def config(self) -> Config:
        """The loaded config: its settings and the script's own values (`gpc.config.BATCH_SIZE`)."""
        return self._config

    @property
    def features(self) -> Features:
        """The config's features, read and checked when it was loaded (what `initialize` applies)."""
        return self._features

    def load_config(self, config: Mapping[str, Any] | str | os.PathLike[str]) -> None:
        """Load `config` (a dict, or the path of a Python config file) and check its features."""
        if isinstance(config, (str, os.PathLike)):
            loaded = Config.from_file(config)
        elif isinstance(config, Mapping):
            loaded = Config(config)
        else:
            raise TypeError(
                f"config must be a dict, a Config or the path of a Python config file, got {type(config).__name__}: "
                f"{config!r}."
            )
        features = read_features(loaded)
        self._config, self._features = loaded, features

    # ------------------------------------------------------------------------------------------- process group
    def init_global_dist(self, rank: int, world_size: int, backend: str, host: str, port: int) -> None:
        """Join the process group of `world_size` processes at `host:port` as `rank` (nothing to do when this
        process is in one already, with that rank and size)."""
        if dist.is_initialized():
            if (dist.get_rank(), dist.get_world_size()) != (rank, world_size):
                raise RuntimeError(
                    f"launch(rank={rank}, world_size={world_size}): this process is already rank "
                    f"{dist.get_rank()} of {dist.get_world_size()}. Launch once per process, with its own rank."
                )
        else:
            from tracktrain.distributed.collectives import collective_timeout

            dist.init_process_group(
                backend,
                init_method=f"tcp://{host}:{port}",
                rank=rank,
                world_size=world_size,
                timeout=collective_timeout(),
            )
        self._groups = {ParallelMode.GLOBAL: _Group(list(range(world_size)), rank, None)}
        self.world_size = world_size

    def init_parallel_groups(self) -> None:
        """Set up the data, model, tensor and (with a pipeline) pipeline groups from the config's `parallel`."""
        rank, world_size = self.get_global_rank(), self.get_world_size(ParallelMode.GLOBAL)
        stages = self._features.pipeline_size
        if world_size % stages:
            raise RuntimeError(
                f"parallel.pipeline = {stages} does not divide the {world_size} processes: start a multiple of "
                f"{stages} processes (torchrun --nproc_per_node {stages * max(1, world_size // stages)})."
            )
        self.pipeline_parallel_size, self.tensor_parallel_size = stages, self._features.tensor_size
        self.data_parallel_size = world_size // stages
        # every rank creates every group, in the same order, as torch.distributed.new_group requires
        data_groups = [list(range(stage, world_size, stages)) for stage in range(stages)]
        pipeline_groups = [
            list(range(replica * stages, (replica + 1) * stages)) for replica in range(world_size // stages)
        ]
        self._register(ParallelMode.DATA, data_groups, rank, world_size)
        self._register(ParallelMode.MODEL, pipeline_groups, rank, world_size)
        if stages > 1:
            self._groups[ParallelMode.PIPELINE] = self._groups[ParallelMode.MODEL]
        self._groups[ParallelMode.TENSOR] = _Group([rank], rank, _single_rank_group(rank, world_size))

    def _register(self, mode: ParallelMode, groups: list[list[int]], rank: int, world_size: int) -> None:
        for ranks in groups:
            group = None if len(ranks) == world_size else dist.new_group(ranks)
            if rank in ranks:
                self._groups[mode] = _Group(ranks, rank, group)

    def detect_num_processes_on_current_node(self) -> None:
        """How many of the job's processes run on this machine (`num_processes_on_current_node`)."""
        self.num_processes_on_current_node = int(os.environ.get("LOCAL_WORLD_SIZE", self.world_size))

    def set_device(self, device_ordinal: int | None = None) -> None:
        """Use CUDA device `device_ordinal` (default: the global rank modulo the devices on this machine)."""
        if torch.cuda.is_available():
            torch.cuda.set_device(
                device_ordinal if device_ordinal is not None else self.get_global_rank() % torch.cuda.device_count()
            )

    def set_seed(self, seed: int) -> None:
        """Seed python's `random`, numpy and torch with `seed` on every rank, as Colossal-AI does."""
        from tracktrain.rng import manual_seed

        manual_seed(seed)

    def destroy(self) -> None:
        """Leave the process group and forget the groups (Colossal-AI's `gpc.destroy()`)."""
        if dist.is_initialized():
            dist.destroy_process_group()
        self.__init__()  # type: ignore[misc]  # back to the state before launch

    # ------------------------------------------------------------------------------------------------- ranks
    def is_initialized(self, parallel_mode: ParallelMode) -> bool:
        """Whether `launch` set up `parallel_mode`'s group."""
        return _mode(parallel_mode) in self._groups

    def _group(self, parallel_mode: ParallelMode) -> _Group:
        group = self._groups.get(_mode(parallel_mode))
        if group is None:
            raise RuntimeError(
                f"{parallel_mode} is not initialized: call tracktrain.colossal.launch_from_torch(config=...) (or "
                "launch) first"
                + (
                    "; the pipeline group exists only with parallel.pipeline > 1."
                    if parallel_mode is ParallelMode.PIPELINE
                    else "."
                )
            )
        return group

    def get_global_rank(self) -> int:
        """This process's rank among all of them."""
        return self._group(ParallelMode.GLOBAL).local_rank

    def get_local_rank(self, parallel_mode: ParallelMode) -> int:
        """This process's rank within its `parallel_mode` group."""
        return self._group(parallel_mode).local_rank

    def get_world_size(self, parallel_mode: ParallelMode) -> int:
        """The number of processes in this process's `parallel_mode` group."""
        return self._group(parallel_mode).world_size

    def get_group(self, parallel_mode: ParallelMode) -> dist.ProcessGroup:
        """The torch.distributed process group of `parallel_mode` (the default group where it spans every rank)."""
        group = self._group(parallel_mode).group
        return group if group is not None else dist.group.WORLD  # type: ignore[return-value]

    def get_cpu_group(self, parallel_mode: ParallelMode) -> dist.ProcessGroup:
        """The same group (gloo on CPU is the only backend a CPU group would use)."""
        return self.get_group(parallel_mode)

    def get_ranks_in_group(self, parallel_mode: ParallelMode) -> list[int]:
        """The global ranks of this process's `parallel_mode` group."""
        return list(self._group(parallel_mode).ranks)

    def is_first_rank(self, parallel_mode: ParallelMode) -> bool:
        return self.get_local_rank(parallel_mode) == 0

    def is_last_rank(self, parallel_mode: ParallelMode) -> bool:
        return self.get_local_rank(parallel_mode) == self.get_world_size(parallel_mode) - 1

    def get_next_global_rank(self, parallel_mode: ParallelMode) -> int:
        group = self._group(parallel_mode)
        return group.ranks[(group.local_rank + 1) % group.world_size]

    def get_prev_global_rank(self, parallel_mode: ParallelMode) -> int:
        group = self._group(parallel_mode)
        return group.ranks[(group.local_rank - 1) % group.world_size]

    def is_pipeline_first_stage(self, ignore_virtual: bool = False) -> bool:
        return not self.is_initialized(ParallelMode.PIPELINE) or self.is_first_rank(ParallelMode.PIPELINE)

    def is_pipeline_last_stage(self, ignore_virtual: bool = False) -> bool:
        return not self.is_initialized(ParallelMode.PIPELINE) or self.is_last_rank(ParallelMode.PIPELINE)


def _mode(parallel_mode: Any) -> ParallelMode:
    if not isinstance(parallel_mode, ParallelMode):
        raise TypeError(
            f"Expected a ParallelMode (from tracktrain.colossal.context import ParallelMode), got {parallel_mode!r}."
        )
    return parallel_mode


def _single_rank_group(rank: int, world_size: int) -> dist.ProcessGroup | None:
    """Each rank's own group (Colossal-AI's tensor group of size 1), created by every rank in the same order."""
    mine = None
    for other in range(world_size):
        group = dist.new_group([other]) if world_size > 1 else None
        if other == rank:
            mine = group
    return mine


global_context = ParallelContext()
"""The process's one `ParallelContext` (`from tracktrain.colossal.core import global_context as gpc`)."""
