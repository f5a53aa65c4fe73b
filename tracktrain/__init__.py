"""tracktrain: a PyTorch training framework with an Ignite-exact event Engine.

`import tracktrain` does not import torch; the names that need it load on first use.
"""

from __future__ import annotations

from tracktrain._lazy import lazy_attributes
from tracktrain.engine import (
    CallableEventWithFilter,
    Engine,
    EventEnum,
    Events,
    EventsList,
    RemovableEventHandle,
    State,
)

__version__ = "0.1.0"

_LAZY = {
    "DataModule": "tracktrain.trainer",
    "LoopModule": "tracktrain.trainer",
    "Trainer": "tracktrain.trainer",
    "Callback": "tracktrain.callbacks",
    "seed_everything": "tracktrain.rng",
    "cli_lightning_logo": "tracktrain.utilities.logo",  # `from lightning.pytorch import cli_lightning_logo`
    "LIGHTNING_LOGO": "tracktrain.utilities.logo",
    **dict.fromkeys(
        (
            "DeterministicEngine",
            "ModelEngine",
            "create_supervised_evaluator",
            "create_supervised_trainer",
            "supervised_evaluation_step",
            "supervised_training_step",
            "initialize",
        ),
        "tracktrain.engine",
    ),
}

__all__ = [
    "LIGHTNING_LOGO",
    "Callback",
    "CallableEventWithFilter",
    "DataModule",
    "DeterministicEngine",
    "Engine",
    "EventEnum",
    "Events",
    "EventsList",
    "LoopModule",
    "ModelEngine",
    "RemovableEventHandle",
    "State",
    "Trainer",
    "__version__",
    "cli_lightning_logo",
    "create_supervised_evaluator",
    "create_supervised_trainer",
    "initialize",
    "seed_everything",
    "supervised_evaluation_step",
    "supervised_training_step",
]


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY)
