"""The Lightning-style layer: `LoopModule` (what a step does), `DataModule` (the data) and `Trainer` (runs them on
Engines)."""

from __future__ import annotations

from tracktrain._lazy import lazy_attributes

_LAZY = {
    "DataModule": "tracktrain.trainer.datamodule",
    "LoopModule": "tracktrain.trainer.module",
    "Trainer": "tracktrain.trainer.trainer",
    "TrainerSurface": "tracktrain.trainer.surface",
    "SupervisedModule": "tracktrain.trainer.supervised_module",
    "PipelineModule": "tracktrain.trainer.pipeline_module",
    "LRSchedulerConfig": "tracktrain.trainer.optimizers",
    "HOOK_EVENTS": "tracktrain.trainer.hooks",
    "TrainerEvents": "tracktrain.trainer.hooks",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY)
