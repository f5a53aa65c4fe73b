"""Colossal-AI's `colossalai.registry`: named tables of classes (`@LOSSES.register_module` on a class of the script's
own, `LOSSES.get_module("NT_Xentloss")`), as Colossal-AI keeps them; tracktrain builds nothing from them by name."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch
from torch import nn

__all__ = [
    "DATASETS",
    "DATA_SAMPLERS",
    "GRADIENT_HANDLER",
    "HOOKS",
    "LAYERS",
    "LOSSES",
    "LR_SCHEDULERS",
    "MODELS",
    "OPHOOKS",
    "OPTIMIZERS",
    "Registry",
    "SCHEDULE",
    "TRANSFORMS",
]


class Registry:
    """Classes by name: `register_module(cls)` (a decorator, returning `cls`), `get_module(name)` (a registered class,
    else one of that name in the `third_party_library` modules), `has(name)`."""

    def __init__(self, name: str, third_party_library: list[ModuleType] | None = None) -> None:
        self._name = name
        self._registry: dict[str, Any] = {}
        self._third_party_lib = list(third_party_library or ())

    @property
    def name(self) -> str:
        return self._name

    def register_module(self, module_class: Any) -> Any:
        name = module_class.__name__
        if name in self._registry:
            raise ValueError(f"{name} is already registered in the {self._name} registry.")
        self._registry[name] = module_class
        return module_class

    def get_module(self, module_name: str) -> Any:
        if module_name in self._registry:
            return self._registry[module_name]
        for library in self._third_party_lib:
            if hasattr(library, module_name):
                return getattr(library, module_name)
        raise NameError(f"{module_name} is not in the {self._name} registry (it has {sorted(self._registry)}).")

    def has(self, module_name: str) -> bool:
        return module_name in self._registry or any(hasattr(library, module_name) for library in self._third_party_lib)


LAYERS = Registry("layers", third_party_library=[nn])
MODELS = Registry("models")
OPTIMIZERS = Registry("optimizers", third_party_library=[torch.optim])
DATASETS = Registry("datasets")
DIST_GROUP_INITIALIZER = Registry("dist_group_initializer")
GRADIENT_HANDLER = Registry("gradient_handler")
LOSSES = Registry("losses", third_party_library=[nn])
HOOKS = Registry("hooks")
TRANSFORMS = Registry("transforms")
DATA_SAMPLERS = Registry("data_samplers")
LR_SCHEDULERS = Registry("lr_schedulers")
SCHEDULE = Registry("schedules")
OPHOOKS = Registry("ophooks")
