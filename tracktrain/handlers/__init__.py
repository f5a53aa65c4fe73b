"""PyTorch-Ignite's handlers for the Engine: checkpoints (`tracktrain.checkpoint`'s, re-exported), early stopping,
NaN guard, timers, progress bar, parameter schedulers, Ignite's logger API (`base_logger`; the trackers' loggers
are faces over tracktrain's, kept with the integrations and imported when first read).

Each handler lives in its own module; names are loaded on first use.
"""

from __future__ import annotations

from tracktrain._lazy import lazy_attributes
from tracktrain.ignite_names import refusal

_LAZY = {
    "Checkpoint": "tracktrain.handlers.checkpoint",
    "BaseSaveHandler": "tracktrain.checkpoint.savers",
    "DiskSaver": "tracktrain.checkpoint.savers",
    "FsspecSaver": "tracktrain.checkpoint.savers",
    "ModelCheckpoint": "tracktrain.handlers.checkpoint",
    "EarlyStopping": "tracktrain.handlers.early_stopping",
    "TerminateOnNan": "tracktrain.handlers.terminate_on_nan",
    "Timer": "tracktrain.handlers.timing",
    "FastaiLRFinder": "tracktrain.handlers.lr_finder",
    "TimeLimit": "tracktrain.handlers.time_limit",
    "EpochOutputStore": "tracktrain.handlers.stores",
    "BasicTimeProfiler": "tracktrain.handlers.time_profilers",
    "HandlersTimeProfiler": "tracktrain.handlers.time_profilers",
    "ProgressBar": "tracktrain.handlers.progress",
    **dict.fromkeys(
        (
            "BaseParamScheduler",
            "BatchSizeScheduler",
            "ConcatScheduler",
            "CosineAnnealingScheduler",
            "CyclicalScheduler",
            "LRScheduler",
            "LinearCyclicalScheduler",
            "ParamGroupScheduler",
            "ParamScheduler",
            "PiecewiseLinear",
            "ReduceLROnPlateauScheduler",
            "create_lr_scheduler_with_warmup",
        ),
        "tracktrain.handlers.param_scheduler",
    ),
    "global_step_from_engine": "tracktrain.handlers.global_step",
    # faces over tracktrain's loggers, with the integrations (they need their tracker's package): see base_logger
    "TensorboardLogger": "tracktrain_integrations.ignite_loggers.tensorboard",
    "MLflowLogger": "tracktrain_integrations.ignite_loggers.mlflow",
    "WandBLogger": "tracktrain_integrations.ignite_loggers.wandb",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY, refused=refusal(__name__, "ignite.handlers"))
