"""Ignite's `ignite.contrib.engines.common`: the training set-up its examples share, on tracktrain's handlers.

- `setup_common_training_handlers(trainer, ...)`: NaN guard, LR scheduling, checkpoints every `save_every_iters`
  (`filename_prefix="training"`), running averages of the outputs named `output_names`, progress bars, the GPU's
  numbers, and under torch.distributed the sampler's epoch and bars on rank 0 only;
- `gen_save_best_models_by_val_score` / `save_best_model_by_val_score`: keep the `n_saved` best models by an
  evaluator's metric; `add_early_stopping_by_val_score`;
- `setup_tb_logging`, `setup_mlflow_logging`, `setup_wandb_logging` (and Ignite's other trackers', which say what to
  use): `tracktrain.handlers.logger_utils`'.
"""

from __future__ import annotations

import gc
import numbers
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LRScheduler as TorchLRScheduler
from torch.utils.data.distributed import DistributedSampler

from tracktrain.checkpoint.handler import Checkpoint
from tracktrain.checkpoint.savers import BaseSaveHandler, DiskSaver
from tracktrain.distributed.ranks import rank_and_world_size
from tracktrain.engine.engine import Engine
from tracktrain.engine.events import Events
from tracktrain.handlers.early_stopping import EarlyStopping
from tracktrain.handlers.global_step import global_step_from_engine
from tracktrain.handlers.logger_utils import (
    setup_clearml_logging,
    setup_mlflow_logging,
    setup_neptune_logging,
    setup_plx_logging,
    setup_tb_logging,
    setup_trains_logging,
    setup_visdom_logging,
    setup_wandb_logging,
)
from tracktrain.handlers.param_scheduler import ParamScheduler
from tracktrain.handlers.progress import ProgressBar
from tracktrain.handlers.terminate_on_nan import TerminateOnNan
from tracktrain.metrics.gpu_info import GpuInfo
from tracktrain.metrics.running_average import RunningAverage
from tracktrain.metrics.usage import RunningBatchWise

__all__ = [
    "Checkpoint",
    "DiskSaver",
    "EarlyStopping",
    "ProgressBar",
    "TerminateOnNan",
    "add_early_stopping_by_val_score",
    "empty_cuda_cache",
    "gen_save_best_models_by_val_score",
    "get_default_score_fn",
    "global_step_from_engine",
    "save_best_model_by_val_score",
    "setup_any_logging",
    "setup_clearml_logging",
    "setup_common_distrib_training_handlers",
    "setup_common_training_handlers",
    "setup_mlflow_logging",
    "setup_neptune_logging",
    "setup_plx_logging",
    "setup_tb_logging",
    "setup_trains_logging",
    "setup_visdom_logging",
    "setup_wandb_logging",
]

get_default_score_fn = Checkpoint.get_default_score_fn


def setup_common_training_handlers(
    trainer: Engine,
    train_sampler: DistributedSampler | None = None,
    to_save: Mapping[str, Any] | None = None,
    save_every_iters: int = 1000,
    output_path: str | None = None,
    lr_scheduler: ParamScheduler | TorchLRScheduler | None = None,
    with_gpu_stats: bool = False,
    output_names: Iterable[str] | None = None,
    with_pbars: bool = True,
    with_pbar_on_iters: bool = True,
    log_every_iters: int = 100,
    stop_on_nan: bool = True,
    clear_cuda_cache: bool = True,
    save_handler: Callable | BaseSaveHandler | None = None,
    **kwargs: Any,
) -> None:
    """Attach the common training handlers to `trainer` (see the module docstring); `kwargs` go to the
    `Checkpoint` of `to_save`."""
    rank, world_size = rank_and_world_size()
    if world_size == 1 and isinstance(train_sampler, DistributedSampler):
        warnings.warn(
            "Argument train_sampler is a distributed sampler, but either there is no distributed setting or world "
            "size is < 2. Train sampler argument will be ignored",
            UserWarning,
            stacklevel=2,
        )
    if output_path is not None and save_handler is not None:
        raise ValueError(
            "Arguments output_path and save_handler are mutually exclusive. Please, define only one of them"
        )
    if stop_on_nan:
        trainer.add_event_handler(Events.ITERATION_COMPLETED, TerminateOnNan())
    if lr_scheduler is not None:
        if isinstance(lr_scheduler, TorchLRScheduler):
            scheduler = lr_scheduler
            trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda engine: scheduler.step())
        else:
            trainer.add_event_handler(Events.ITERATION_STARTED, lr_scheduler)
    if torch.cuda.is_available() and clear_cuda_cache:
        trainer.add_event_handler(Events.EPOCH_COMPLETED, empty_cuda_cache)
    if to_save is not None:
        if output_path is None and save_handler is None:
            raise ValueError(
                "If to_save argument is provided then output_path or save_handler arguments should be also defined"
            )
        handler = DiskSaver(dirname=output_path, require_empty=False) if output_path is not None else save_handler
        assert handler is not None
        checkpoint = Checkpoint(to_save, handler, filename_prefix="training", **kwargs)
        trainer.add_event_handler(Events.ITERATION_COMPLETED(every=save_every_iters), checkpoint)
    if with_gpu_stats:
        GpuInfo().attach(trainer, name="gpu", event_name=Events.ITERATION_COMPLETED(every=log_every_iters))
    if output_names is not None:
        for index, name in enumerate(output_names):
            RunningAverage(output_transform=partial(_named_output, index=index, name=name)).attach(
                trainer, name, usage=RunningBatchWise()
            )
    if with_pbars and rank == 0:
        if with_pbar_on_iters:
            ProgressBar(persist=False).attach(
                trainer, metric_names="all", event_name=Events.ITERATION_COMPLETED(every=log_every_iters)
            )
        ProgressBar(persist=True, bar_format="").attach(
            trainer, event_name=Events.EPOCH_STARTED, closing_event_name=Events.COMPLETED
        )
    if world_size > 1 and train_sampler is not None:
        if not isinstance(train_sampler, DistributedSampler):
            raise TypeError("Train sampler should be torch DistributedSampler and have `set_epoch` method")
        sampler = train_sampler
        trainer.add_event_handler(Events.EPOCH_STARTED, lambda engine: sampler.set_epoch(engine.state.epoch - 1))


setup_common_distrib_training_handlers = setup_common_training_handlers


def _named_output(output: Any, index: int, name: str) -> Any:
    if isinstance(output, Mapping):
        return output[name]
    if isinstance(output, Sequence):
        return output[index]
    if isinstance(output, (torch.Tensor, numbers.Number)):
        return output
    raise TypeError(
        f"Unhandled type of update_function's output. It should either mapping or sequence, but given {type(output)}"
    )


def empty_cuda_cache(_: Engine) -> None:
    """Give the CUDA caching allocator's free blocks back, and collect garbage."""
    torch.cuda.empty_cache()
    gc.collect()


def setup_any_logging(*args: Any, **kwargs: Any) -> None:
    """Removed from Ignite (deprecated since 0.4.0): raises, as Ignite's does."""
    raise DeprecationWarning(
        "This function has been deprecated since version 0.4.0 and will be removed in version 0.6.0. Please use "
        "instead: setup_tb_logging, setup_mlflow_logging or setup_wandb_logging."
    )


def gen_save_best_models_by_val_score(
    save_handler: Callable | BaseSaveHandler,
    evaluator: Engine,
    models: nn.Module | Mapping[str, nn.Module],
    metric_name: str,
    n_saved: int = 3,
    trainer: Engine | None = None,
    tag: str = "val",
    score_sign: float = 1.0,
    **kwargs: Any,
) -> Checkpoint:
    """Keep the `n_saved` best of `models` by `evaluator.state.metrics[metric_name]` (`score_sign=-1`: the lowest),
    files `best_..._{tag}_{metric}=...`, at the trainer's epoch when `trainer` is given."""
    to_save = {"model": models} if isinstance(models, nn.Module) else dict(models)
    checkpoint = Checkpoint(
        to_save,
        save_handler,
        filename_prefix="best",
        n_saved=n_saved,
        global_step_transform=global_step_from_engine(trainer) if trainer is not None else None,
        score_name=f"{tag}_{metric_name.lower()}",
        score_function=get_default_score_fn(metric_name, score_sign=score_sign),
        **kwargs,
    )
    evaluator.add_event_handler(Events.COMPLETED, checkpoint)
    return checkpoint


def save_best_model_by_val_score(
    output_path: str,
    evaluator: Engine,
    model: nn.Module,
    metric_name: str,
    n_saved: int = 3,
    trainer: Engine | None = None,
    tag: str = "val",
    score_sign: float = 1.0,
    **kwargs: Any,
) -> Checkpoint:
    """`gen_save_best_models_by_val_score` into the directory `output_path`."""
    return gen_save_best_models_by_val_score(
        DiskSaver(dirname=output_path, require_empty=False),
        evaluator,
        model,
        metric_name,
        n_saved=n_saved,
        trainer=trainer,
        tag=tag,
        score_sign=score_sign,
        **kwargs,
    )


def add_early_stopping_by_val_score(
    patience: int, evaluator: Engine, trainer: Engine, metric_name: str, score_sign: float = 1.0
) -> EarlyStopping:
    """Stop `trainer` when `evaluator.state.metrics[metric_name]` has not improved for `patience` evaluations."""
    stopping = EarlyStopping(
        patience=patience, score_function=get_default_score_fn(metric_name, score_sign=score_sign), trainer=trainer
    )
    evaluator.add_event_handler(Events.COMPLETED, stopping)
    return stopping
