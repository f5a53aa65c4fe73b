"""A sharded module's and optimizer's state in a checkpoint: in full (the format of an unsharded one's), or as each
rank's shards.

`FullModelState` and `FullOptimizerState` stand in for a module and an optimizer in a checkpoint's objects:
`state_dict()` gathers the full tensors onto rank 0's CPU (the rank that writes; the others get `{}`). The optimizer's
state is keyed by parameter index, as `Optimizer.state_dict()` keys it, not by parameter name as
`torch.distributed.checkpoint` does: a checkpoint of a sharded fit is then a checkpoint of a single-device one.

`ShardedModelState` and `ShardedOptimizerState` save each rank's shards as they are (DTensors, for `ShardedSaver`):
no rank ever holds the full state.

`ShardedSaving` makes the savers of sharded checkpoints for a strategy (with the process group of their own).

All four load either kind: a full state (each rank keeps its shards of it), or the `StoredShards` of a sharded
checkpoint, of which each rank reads just its own shards, in the layout it has now (any number of ranks). They talk
to the other ranks, so every rank calls them at the same point (the checkpoint handler does);
`state_dict_has_side_effects` tells `Checkpoint.load_objects` not to call `state_dict()` for a backup copy.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from tracktrain.checkpoint.sharded import StoredShards, by_index, by_parameter_name
from tracktrain.checkpoint.sharded_saver import ShardedSaver
from tracktrain.distributed import collectives as distributed

__all__ = [
    "FullModelState",
    "FullOptimizerState",
    "ShardedModelState",
    "ShardedOptimizerState",
    "ShardedSaving",
    "with_stand_ins",
]

_SAVE = StateDictOptions(full_state_dict=True, cpu_offload=True)
_LOAD = StateDictOptions(full_state_dict=True)


class _ModelState:
    state_dict_has_side_effects = True
    loads_stored_shards = True

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def load_state_dict(self, state_dict: Any, strict: bool = True) -> None:
        if isinstance(state_dict, StoredShards):
            shards = state_dict.load_into(get_model_state_dict(self.module))
            set_model_state_dict(self.module, shards, options=StateDictOptions(strict=strict))
        else:
            options = StateDictOptions(full_state_dict=True, strict=strict)
            set_model_state_dict(self.module, state_dict, options=options)


class FullModelState(_ModelState):
    """`module`'s full state dict, gathered for saving and sharded on loading."""

    def state_dict(self) -> dict[str, Any]:
        return get_model_state_dict(self.module, options=_SAVE)


class ShardedModelState(_ModelState):
    """`module`'s state dict as this rank's shards."""

    def state_dict(self) -> dict[str, Any]:
        return get_model_state_dict(self.module)


class _OptimizerState:
    state_dict_has_side_effects = True
    loads_stored_shards = True

    def __init__(self, module: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.module = module
        self.optimizer = optimizer

    def load_state_dict(self, state_dict: Any) -> None:
        if isinstance(state_dict, StoredShards) and not state_dict.keyed_by_parameter_name():
            state_dict = state_dict.full()  # keyed by index: loaded as a full state is
        if isinstance(state_dict, StoredShards):
            shards = state_dict.load_into(get_optimizer_state_dict(self.module, self.optimizer))
            set_optimizer_state_dict(self.module, self.optimizer, shards)
            return
        if not _keyed_by_index(state_dict):  # a sharded save of an optimizer without tensor state (plain SGD)
            set_optimizer_state_dict(self.module, self.optimizer, state_dict)
            return
        names = {id(parameter): name for name, parameter in self.module.named_parameters()}
        ordered = [names[id(parameter)] for group in self.optimizer.param_groups for parameter in group["params"]]
        by_name = by_parameter_name(state_dict, ordered)
        set_optimizer_state_dict(self.module, self.optimizer, by_name, options=_LOAD)


class FullOptimizerState(_OptimizerState):
    """`optimizer`'s full state (it steps `module`'s sharded parameters), keyed by parameter index."""

    def state_dict(self) -> dict[str, Any]:
        by_name = get_optimizer_state_dict(self.module, self.optimizer, options=_SAVE)
        return by_index(by_name) if by_name else by_name  # {} on the ranks that do not write


class ShardedOptimizerState(_OptimizerState):
    """`optimizer`'s state as this rank's shards, keyed by parameter name (as `torch.distributed.checkpoint`
    reshards it)."""

    def state_dict(self) -> dict[str, Any]:
        return get_optimizer_state_dict(self.module, self.optimizer)


class ShardedSaving:
    """The savers of a strategy's sharded checkpoints, every rank writing its shards. Their collectives use a gloo
    group of their own, made at the first saver, on every rank at the same point (the callbacks' set-up), so that a
    save in the background never meets the training step's collectives."""

    def __init__(self, timeout: timedelta | None = None) -> None:
        self.timeout = timeout
        self._group: torch.distributed.ProcessGroup | None = None

    def saver(self, url: str, summarize: Callable[[Any], Any]) -> ShardedSaver:
        if self._group is None and torch.distributed.is_initialized():
            self._group = torch.distributed.new_group(
                backend="gloo", timeout=distributed.collective_timeout(self.timeout)
            )
        return ShardedSaver(url, summarize=summarize, process_group=self._group)


def _keyed_by_index(state: Any) -> bool:
    groups = state.get("param_groups") if isinstance(state, dict) else None
    return not groups or all(isinstance(key, int) for group in groups for key in group.get("params", ()))


def with_stand_ins(
    objects: dict[str, Any],
    module: nn.Module,
    model_state: type[_ModelState] = ShardedModelState,
    optimizer_state: type[_OptimizerState] = ShardedOptimizerState,
) -> dict[str, Any]:
    """A checkpoint's `objects` with `module` and its optimizers replaced by the stand-ins that save and load them
    (each rank's shards, or with the Full* ones the full state on rank 0)."""
    converted = dict(objects)
    if converted.get("model") is module:
        converted["model"] = model_state(module)
    if "optimizers" in converted:
        converted["optimizers"] = [optimizer_state(module, optimizer) for optimizer in converted["optimizers"]]
    return converted
