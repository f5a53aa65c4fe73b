"""Ignite's `ignite.contrib.handlers`: the handlers Ignite keeps under this older path, the same objects as
`tracktrain.handlers`' (loaded on first use)."""

from __future__ import annotations

from tracktrain._lazy import lazy_attributes
from tracktrain.ignite_names import refusal

_LAZY = dict.fromkeys(
    (
        "BasicTimeProfiler",
        "ConcatScheduler",
        "CosineAnnealingScheduler",
        "EpochOutputStore",
        "FastaiLRFinder",
        "HandlersTimeProfiler",
        "LRScheduler",
        "LinearCyclicalScheduler",
        "MLflowLogger",
        "ParamGroupScheduler",
        "PiecewiseLinear",
        "ProgressBar",
        "TensorboardLogger",
        "WandBLogger",
        "create_lr_scheduler_with_warmup",
        "global_step_from_engine",
    ),
    "tracktrain.handlers",
)

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY, refused=refusal(__name__, "ignite.contrib.handlers"))
