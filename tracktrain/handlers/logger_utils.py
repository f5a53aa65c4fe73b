"""Ignite's `ignite.handlers.logger_utils`: one call that logs a training run to a tracker, Ignite's way: the
trainer's metrics every `log_every_iters` iterations under "training", the optimizers' learning rates, and each
evaluator's metrics at its COMPLETED under its name, on the trainer's step axis.

The loggers are the faces of `tracktrain.handlers.tensorboard_logger`, `.mlflow_logger` and `.wandb_logger`
(imported on first use). Visdom, Neptune, Polyaxon and ClearML are not offered: their setup functions say what to use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch.optim import Optimizer

import tracktrain.handlers as handlers
from tracktrain.engine.engine import Engine
from tracktrain.engine.events import Events
from tracktrain.handlers.base_logger import BaseLogger
from tracktrain.handlers.global_step import global_step_from_engine

__all__ = [
    "setup_clearml_logging",
    "setup_mlflow_logging",
    "setup_neptune_logging",
    "setup_plx_logging",
    "setup_tb_logging",
    "setup_trains_logging",
    "setup_visdom_logging",
    "setup_wandb_logging",
]

MetricNames = str | list[str]


def _setup_logging(
    logger: BaseLogger,
    trainer: Engine,
    optimizers: Optimizer | Mapping[Any, Optimizer] | None,
    evaluators: Engine | Mapping[str, Engine] | None,
    log_every_iters: int | None,
    trainer_metric_names: MetricNames = "all",
    evaluator_metric_names: MetricNames = "all",
) -> None:
    if optimizers is not None and not isinstance(optimizers, (Optimizer, Mapping)):
        raise TypeError(
            f"Argument optimizers should be either a single optimizer or a dictionary or optimizers, got {optimizers!r}"
        )
    if evaluators is not None and not isinstance(evaluators, (Engine, Mapping)):
        raise TypeError(
            f"Argument evaluators should be either a single engine or a dictionary or engines, got {evaluators!r}"
        )
    every = 1 if log_every_iters is None else log_every_iters
    logger.attach_output_handler(
        trainer, event_name=Events.ITERATION_COMPLETED(every=every), tag="training", metric_names=trainer_metric_names
    )
    if optimizers is not None:
        named = {None: optimizers} if isinstance(optimizers, Optimizer) else optimizers
        for tag, optimizer in named.items():
            logger.attach_opt_params_handler(
                trainer, Events.ITERATION_STARTED(every=every), optimizer, param_name="lr", tag=tag
            )
    if evaluators is not None:
        named_evaluators = {"validation": evaluators} if isinstance(evaluators, Engine) else evaluators
        # W&B's step axis only grows: the evaluators' values go at the trainer's iteration, as in Ignite
        custom = Events.ITERATION_COMPLETED if logger.steps_only_grow else None
        step = global_step_from_engine(trainer, custom_event_name=custom)
        for tag, evaluator in named_evaluators.items():
            logger.attach_output_handler(
                evaluator,
                event_name=Events.COMPLETED,
                tag=tag,
                metric_names=evaluator_metric_names,
                global_step_transform=step,
            )


def setup_tb_logging(
    output_path: str,
    trainer: Engine,
    optimizers: Optimizer | Mapping[Any, Optimizer] | None = None,
    evaluators: Engine | Mapping[str, Engine] | None = None,
    log_every_iters: int = 100,
    *,
    trainer_metric_names: MetricNames = "all",
    evaluator_metric_names: MetricNames = "all",
    **kwargs: Any,
) -> Any:
    """A `TensorboardLogger` writing to `output_path`, attached as the module docstring says."""
    logger = handlers.TensorboardLogger(log_dir=output_path, **kwargs)
    _setup_logging(
        logger, trainer, optimizers, evaluators, log_every_iters, trainer_metric_names, evaluator_metric_names
    )
    return logger


def setup_mlflow_logging(
    trainer: Engine,
    optimizers: Optimizer | Mapping[Any, Optimizer] | None = None,
    evaluators: Engine | Mapping[str, Engine] | None = None,
    log_every_iters: int = 100,
    *,
    trainer_metric_names: MetricNames = "all",
    evaluator_metric_names: MetricNames = "all",
    **kwargs: Any,
) -> Any:
    """An `MLflowLogger(**kwargs)`, attached as the module docstring says."""
    logger = handlers.MLflowLogger(**kwargs)
    _setup_logging(
        logger, trainer, optimizers, evaluators, log_every_iters, trainer_metric_names, evaluator_metric_names
    )
    return logger


def setup_wandb_logging(
    trainer: Engine,
    optimizers: Optimizer | Mapping[Any, Optimizer] | None = None,
    evaluators: Engine | Mapping[str, Engine] | None = None,
    log_every_iters: int = 100,
    *,
    trainer_metric_names: MetricNames = "all",
    evaluator_metric_names: MetricNames = "all",
    **kwargs: Any,
) -> Any:
    """A `WandBLogger(**kwargs)` (wandb.init's arguments), attached as the module docstring says."""
    logger = handlers.WandBLogger(**kwargs)
    _setup_logging(
        logger, trainer, optimizers, evaluators, log_every_iters, trainer_metric_names, evaluator_metric_names
    )
    return logger


def _not_offered(tracker: str) -> Any:
    def setup(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"tracktrain does not offer Ignite's {tracker} logger: log to TensorBoard (setup_tb_logging), MLflow "
            "(setup_mlflow_logging) or W&B (setup_wandb_logging), the trackers tracktrain delivers to without ever "
            "blocking training."
        )

    setup.__name__ = f"setup_{tracker.lower()}_logging"
    setup.__doc__ = f"Not offered: raises, naming the trackers to use instead of {tracker}."
    return setup


setup_visdom_logging = _not_offered("Visdom")
setup_neptune_logging = _not_offered("Neptune")
setup_plx_logging = _not_offered("Polyaxon")
setup_clearml_logging = _not_offered("ClearML")
setup_trains_logging = _not_offered("ClearML (Trains)")
