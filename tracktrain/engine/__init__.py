"""The event Engine with PyTorch-Ignite's semantics and how one step runs on it: the supervised step factories, the
schedule (plain or pipelined) and Colossal-AI's `ModelEngine`.

`Engine`, `Events` and friends import without torch; the names that need torch (`DeterministicEngine`, the
supervised steps) are loaded on first use, so `import tracktrain` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracktrain._lazy import lazy_attributes
from tracktrain.engine.engine import Engine
from tracktrain.engine.events import CallableEventWithFilter, EventEnum, Events, EventsList, RemovableEventHandle
from tracktrain.engine.state import State

if TYPE_CHECKING:
    from tracktrain.engine.batches import convert_tensor
    from tracktrain.engine.combined_loader import CombinedLoader
    from tracktrain.engine.deterministic import DeterministicEngine, ReproducibleBatchSampler
    from tracktrain.engine.model_engine import BaseOpHook, ModelEngine, StepEvents, initialize
    from tracktrain.engine.supervised import (
        supervised_evaluation_step,
        supervised_evaluation_step_amp,
        supervised_training_step,
        supervised_training_step_amp,
        supervised_training_step_apex,
        supervised_training_step_tpu,
    )
    from tracktrain.engine.supervised_engines import create_supervised_evaluator, create_supervised_trainer

_LAZY = {
    "convert_tensor": "tracktrain.engine.batches",
    "CombinedLoader": "tracktrain.engine.combined_loader",
    "BaseOpHook": "tracktrain.engine.model_engine",
    "ModelEngine": "tracktrain.engine.model_engine",
    "StepEvents": "tracktrain.engine.model_engine",
    "initialize": "tracktrain.engine.model_engine",
    "DeterministicEngine": "tracktrain.engine.deterministic",
    "ReproducibleBatchSampler": "tracktrain.engine.deterministic",
    "create_supervised_evaluator": "tracktrain.engine.supervised_engines",
    "create_supervised_trainer": "tracktrain.engine.supervised_engines",
    "supervised_evaluation_step": "tracktrain.engine.supervised",
    "supervised_evaluation_step_amp": "tracktrain.engine.supervised",
    "supervised_training_step": "tracktrain.engine.supervised",
    "supervised_training_step_amp": "tracktrain.engine.supervised",
    "supervised_training_step_apex": "tracktrain.engine.supervised",
    "supervised_training_step_tpu": "tracktrain.engine.supervised",
}

__all__ = [
    "BaseOpHook",
    "CallableEventWithFilter",
    "CombinedLoader",
    "DeterministicEngine",
    "Engine",
    "EventEnum",
    "Events",
    "EventsList",
    "ModelEngine",
    "RemovableEventHandle",
    "ReproducibleBatchSampler",
    "State",
    "StepEvents",
    "create_supervised_evaluator",
    "create_supervised_trainer",
    "initialize",
    "supervised_evaluation_step",
    "supervised_evaluation_step_amp",
    "supervised_training_step",
    "supervised_training_step_amp",
    "supervised_training_step_apex",
    "supervised_training_step_tpu",
    "convert_tensor",
]


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY)
