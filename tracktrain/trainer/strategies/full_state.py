"""A sharded module's and optimizer's full state, in the format of an unsharded one's, for checkpoints.

`FullModelState` and `FullOptimizerState` stand in for a module and an optimizer in a checkpoint's objects:
`state_dict()` gathers the full tensors onto rank 0's CPU (the rank that writes; the others get `{}`), and
`load_state_dict` takes a full state and keeps this rank's shards of it. The optimizer's state is keyed by
parameter index, as `Optimizer.state_dict()` keys it, not by parameter name as `torch.distributed.checkpoint`
does: a checkpoint of a sharded fit is a checkpoint of a single-device one, and loads into either.

Both gather with collectives, so every rank calls them at the same point (the checkpoint handler does);
`state_dict_has_side_effects` tells `Checkpoint.load_objects` not to call `state_dict()` for a backup copy.
"""

from __future__ import annotations

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

__all__ = ["FullModelState", "FullOptimizerState"]

_SAVE = StateDictOptions(full_state_dict=True, cpu_offload=True)
_LOAD = StateDictOptions(full_state_dict=True)


class FullModelState:
    """`module`'s full state dict, gathered for saving and sharded on loading."""

    state_dict_has_side_effects = True

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def state_dict(self) -> dict[str, Any]:
        return get_model_state_dict(self.module, options=_SAVE)

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True) -> None:
        options = StateDictOptions(full_state_dict=True, strict=strict)
        set_model_state_dict(self.module, state_dict, options=options)


class FullOptimizerState:
    """`optimizer`'s full state (it steps `module`'s sharded parameters), keyed by parameter index."""

    state_dict_has_side_effects = True

    def __init__(self, module: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.module = module
        self.optimizer = optimizer

    def state_dict(self) -> dict[str, Any]:
        by_name = get_optimizer_state_dict(self.module, self.optimizer, options=_SAVE)
        return by_index(by_name) if by_name else by_name  # {} on the ranks that do not write

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        names = {id(parameter): name for name, parameter in self.module.named_parameters()}
        ordered = [names[id(parameter)] for group in self.optimizer.param_groups for parameter in group["params"]]
        by_name = by_parameter_name(state_dict, ordered)
        set_optimizer_state_dict(self.module, self.optimizer, by_name, options=_LOAD)


def by_index(state: dict[str, Any]) -> dict[str, Any]:
    """An optimizer state keyed by parameter name (torch.distributed.checkpoint's) keyed by index instead: the
    parameters numbered in the order of the parameter groups, as `Optimizer.state_dict()` numbers them."""
    order = [name for group in state["param_groups"] for name in group["params"]]
    index = {name: number for number, name in enumerate(order)}
    return {
        "state": {index[name]: value for name, value in state["state"].items()},
        "param_groups": [
            {**group, "params": [index[name] for name in group["params"]]} for group in state["param_groups"]
        ],
    }


def by_parameter_name(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The inverse of `by_index`, for an optimizer whose parameters, in the order of its groups, are `names`."""
    count = sum(len(group["params"]) for group in state["param_groups"])
    if count != len(names):
        raise ValueError(
            f"The checkpoint's optimizer state has {count} parameters, but the optimizer being loaded steps "
            f"{len(names)}: it was saved for another model or another configure_optimizers()."
        )
    return {
        "state": {names[number]: value for number, value in state["state"].items()},
        "param_groups": [
            {**group, "params": [names[number] for number in group["params"]]} for group in state["param_groups"]
        ],
    }
