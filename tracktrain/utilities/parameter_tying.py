"""Lightning's parameter tying helpers: which parameters several layers share, and tying them again (after a move
that untied them)."""

from __future__ import annotations

from torch import nn

__all__ = ["find_shared_parameters", "set_shared_parameters"]


def find_shared_parameters(module: nn.Module) -> list[list[str]]:
    """The names under which each parameter shared by several layers is reachable, one list per parameter."""
    names: dict[int, list[str]] = {}
    for name, parameter in module.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), []).append(name)
    return [found for found in names.values() if len(found) > 1]


def set_shared_parameters(module: nn.Module, shared: list[list[str]]) -> nn.Module:
    """Tie the parameters of each list of `shared` names (as `find_shared_parameters` gives them) to the first one."""
    for names in shared:
        first = module.get_parameter(names[0])
        for name in names[1:]:
            owner, _, attribute = name.rpartition(".")
            setattr(module.get_submodule(owner), attribute, first)
    return module
