"""tracktrain: a PyTorch training framework with an Ignite-exact event Engine.

`import tracktrain` does not import torch; the names that need it load on first use.
"""

from __future__ import annotations

from typing import Any

from tracktrain import engine as _engine
from tracktrain.engine import CallableEventWithFilter, Engine, EventEnum, Events, EventsList, RemovableEventHandle, State

__version__ = "0.1.0"

_FROM_ENGINE = {
    "DeterministicEngine",
    "create_supervised_evaluator",
    "create_supervised_trainer",
    "supervised_evaluation_step",
    "supervised_training_step",
}

__all__ = [
    "CallableEventWithFilter",
    "DeterministicEngine",
    "Engine",
    "EventEnum",
    "Events",
    "EventsList",
    "RemovableEventHandle",
    "State",
    "__version__",
    "create_supervised_evaluator",
    "create_supervised_trainer",
    "supervised_evaluation_step",
    "supervised_training_step",
]


def __getattr__(name: str) -> Any:
    if name in _FROM_ENGINE:
        value = getattr(_engine, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
