"""Colossal-AI's `colossalai.trainer.hooks`, with Colossal-AI's signatures.

The built-in hooks *are* the Trainer's built-in callbacks (subclasses that only map the arguments), so there is one
implementation of each; their Colossal-AI `priority` is kept as `hook_priority`, the order in which the Colossal
`Trainer` hands them to tracktrain's Trainer (a callback's own order is its phase: `tracktrain.callbacks.CallbackPhase`).
A hook of the script's own subclasses `BaseHook` and overrides Colossal-AI's methods (`before_train`,
`after_train_iter(trainer, output, label, loss)`, ...); the Colossal `Trainer` runs each at its point of the run,
only those the hook overrides. `TensorboardHook` installs the core's `TensorBoardLogger` (it needs the tensorboard
package only when made).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn

from tracktrain.callbacks.base import Callback
from tracktrain.callbacks.memory import MemoryMonitor
from tracktrain.callbacks.metric_printer import MetricPrinter
from tracktrain.callbacks.metric_tracking import AccuracyTracker, LossTracker, prediction_and_target
from tracktrain.callbacks.model_checkpoint import ModelCheckpoint
from tracktrain.callbacks.reporting import report
from tracktrain.callbacks.timing import Timing
from tracktrain.colossal.nn.metric import Accuracy as AccuracyFunction
from tracktrain.distributed.logger import DistributedLogger
from tracktrain.distributed.ranks import global_rank, rank_and_world_size
from tracktrain.engine.events import Events
from tracktrain.handlers.multi_timer import MultiTimer
from tracktrain.loggers.tensorboard_logger import TensorBoardLogger, summary_writer
from tracktrain.metrics.distributed import all_reduce_sum
from tracktrain.metrics.metric import Metric, NotComputableError
from tracktrain.trainer.optimizers import LRSchedulerConfig

__all__ = [
    "AccuracyHook",
    "BaseHook",
    "LRSchedulerHook",
    "LogMemoryByEpochHook",
    "LogMetricByEpochHook",
    "LogTimingByEpochHook",
    "LossHook",
    "MetricHook",
    "SaveCheckpointHook",
    "TensorboardHook",
    "ThroughputHook",
    "in_priority_order",
]


class BaseHook:
    """Colossal-AI's `BaseHook(priority)`: override the methods of the points you need; the Colossal `Trainer`
    calls each with itself (`trainer.engine`, `trainer.states`, `trainer.cur_epoch`, `trainer.cur_step`, ...), after
    a training or test iteration with the step's `output`, `label` and `loss` too. Hooks run in order of
    `priority`, lower first."""

    def __init__(self, priority: int) -> None:
        self.priority = priority

    def after_hook_is_attached(self, trainer: Any) -> None: ...

    def before_train(self, trainer: Any) -> None: ...

    def after_train(self, trainer: Any) -> None: ...

    def before_train_epoch(self, trainer: Any) -> None: ...

    def after_train_epoch(self, trainer: Any) -> None: ...

    def before_train_iter(self, trainer: Any) -> None: ...

    def after_train_iter(self, trainer: Any, output: Any, label: Any, loss: Any) -> None: ...

    def before_test(self, trainer: Any) -> None: ...

    def after_test(self, trainer: Any) -> None: ...

    def before_test_epoch(self, trainer: Any) -> None: ...

    def after_test_epoch(self, trainer: Any) -> None: ...

    def before_test_iter(self, trainer: Any) -> None: ...

    def after_test_iter(self, trainer: Any, output: Any, label: Any, loss: Any) -> None: ...

    def init_runner_states(self, trainer: Any, key: str, val: Any) -> None:
        """Set `trainer.states[key]` to `val` unless a hook set it already."""
        runner = trainer  # the Colossal Trainer (Colossal-AI's "runner"), not tracktrain's: its own `states` dict
        runner.states.setdefault(key, val)


class MetricHook(BaseHook):
    """Colossal-AI's base of the metric hooks: `trainer.states["metrics"]` holds `{"train": {}, "test": {}}`."""

    def _check_metric_states_initialization(self, trainer: Any) -> None:
        self.init_runner_states(trainer, "metrics", {"train": {}, "test": {}})


def priority_of(hook: object) -> int:
    """A hook's Colossal-AI priority: a `BaseHook`'s `priority`, a built-in hook's `hook_priority` (0 for another
    callback); a `BaseHook` subclass whose `__init__` did not call `BaseHook.__init__` is refused."""
    if isinstance(hook, BaseHook):
        if not hasattr(hook, "priority"):
            raise TypeError(
                f"{type(hook).__name__} has no priority: its __init__ must call super().__init__(priority) "
                "(Colossal-AI's trainer sorts its hooks by it)."
            )
        return hook.priority
    return getattr(hook, "hook_priority", 0)


def in_priority_order(hooks: Iterable[object]) -> list[Any]:
    """Colossal-AI's hook order: by priority (`priority_of`), lower first, stable."""
    return sorted(hooks, key=priority_of)


class LossHook(LossTracker):
    """The epoch's mean training loss as `train_loss_avg` (a metric: it runs before the epoch's values are
    gathered, whatever its `priority` among the hooks)."""

    def __init__(self, priority: int = 0) -> None:
        super().__init__()
        self.hook_priority = priority


class _CountedAccuracy(Metric):
    """The fraction of correct predictions, counting each batch's with `accuracy_func(output, label)` (a number of
    correct samples, as Colossal-AI's accuracy functions return), over the ranks."""

    def __init__(self, accuracy_func: Callable[[Any, Any], Any]) -> None:
        self.accuracy_func = accuracy_func
        super().__init__(output_transform=prediction_and_target)

    def reset(self) -> None:
        self._correct = torch.zeros(())
        self._count = 0

    def update(self, output: Any) -> None:
        logits, labels = output
        self._correct = self._correct + torch.as_tensor(self.accuracy_func(logits, labels)).detach().cpu().double()
        self._count += len(labels)

    def compute(self) -> float:
        correct, count = all_reduce_sum(self._correct, float(self._count))
        if not count:
            raise NotComputableError("AccuracyHook needs at least one test batch.")
        return float(correct) / float(count)


class AccuracyHook(AccuracyTracker):
    """Accuracy over each evaluation as `val_accuracy` (and `test_accuracy`), counting the correct predictions of
    each batch with `accuracy_func(output, label)` (`tracktrain.colossal.nn.metric.Accuracy()`: the arg-max; then
    it is tracktrain's `Accuracy` metric); `priority` as in `LossHook`."""

    def __init__(self, accuracy_func: Callable[[Any, Any], Any], priority: int = 0) -> None:
        if not callable(accuracy_func):
            raise TypeError(
                f"AccuracyHook(accuracy_func=...) takes a function counting a batch's correct predictions, e.g. "
                f"tracktrain.colossal.nn.metric.Accuracy(); got {accuracy_func!r}."
            )
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise TypeError(f"AccuracyHook(priority=...) must be an int, got {priority!r}.")
        self.accuracy_func = accuracy_func
        super().__init__()
        self.hook_priority = priority

    def _new_metric(self, stage: str) -> Metric:
        if isinstance(self.accuracy_func, AccuracyFunction):
            return super()._new_metric(stage)
        return _CountedAccuracy(self.accuracy_func)


class LRSchedulerHook(Callback):
    """Step `lr_scheduler` after every training epoch (`by_epoch`) or every training iteration; with
    `store_lr_in_state`, the first parameter group's learning rate is reported as `lr`. The scheduler's state rides
    in the Trainer's checkpoints."""

    def __init__(self, lr_scheduler: Any, by_epoch: bool, store_lr_in_state: bool = True, priority: int = 1) -> None:
        if not callable(getattr(lr_scheduler, "step", None)):
            raise TypeError(f"LRSchedulerHook(lr_scheduler=...) takes a learning-rate scheduler, got {lr_scheduler!r}.")
        self.lr_scheduler = lr_scheduler
        self.by_epoch = bool(by_epoch)
        self.config = LRSchedulerConfig(lr_scheduler, interval="epoch" if by_epoch else "step")
        self.store_lr_in_state = store_lr_in_state
        self.hook_priority = priority

    def event_handlers(self, trainer: Any) -> Iterable[tuple[str, Any, Callable]]:
        event = Events.EPOCH_COMPLETED if self.by_epoch else Events.ITERATION_COMPLETED
        return [("fit", event, lambda: self._step(trainer))]

    def _step(self, trainer: Any) -> None:
        self.config.step(trainer.callback_metrics)
        if self.store_lr_in_state:
            report(trainer, {"lr": float(self.lr_scheduler.get_last_lr()[0])})

    def state_dict(self) -> dict[str, Any]:
        return {"scheduler": self.lr_scheduler.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.lr_scheduler.load_state_dict(state_dict["scheduler"])


class LogMetricByEpochHook(MetricPrinter):
    """One line of the epoch's values every `interval` epochs, through `logger`."""

    def __init__(self, logger: DistributedLogger, interval: int = 1, priority: int = 10) -> None:
        super().__init__(logger, every_n_epochs=interval)
        self.hook_priority = priority  # among the printers: it runs after the epoch's values are published


class LogMemoryByEpochHook(MemoryMonitor):
    """Process memory (and CUDA peak memory) after each epoch, through `logger` (the process's memory is the
    CPU's, so `report_cpu`, which Colossal-AI's hook takes and never reads, changes nothing either way)."""

    def __init__(
        self,
        logger: DistributedLogger,
        interval: int = 1,
        priority: int = 10,
        log_eval: bool = True,
        report_cpu: bool = False,
    ) -> None:
        _only_defaults("LogMemoryByEpochHook", interval=(interval, 1), log_eval=(log_eval, True))
        super().__init__(logger)
        self.hook_priority = priority


class LogTimingByEpochHook(Timing):
    """Epoch and step times and throughput after each epoch (and validation time), through `logger`, timed with
    `timer`."""

    def __init__(
        self,
        timer: MultiTimer,
        logger: DistributedLogger,
        interval: int = 1,
        priority: int = 10,
        log_eval: bool = True,
        ignore_num_train_steps: int = 0,
    ) -> None:
        _only_defaults(
            "LogTimingByEpochHook",
            interval=(interval, 1),
            log_eval=(log_eval, True),
            ignore_num_train_steps=(ignore_num_train_steps, 0),
        )
        super().__init__(logger, timer)
        self.hook_priority = priority


class ThroughputHook(Timing):
    """Samples per second of training (and evaluation), reported after each epoch with the timing values."""

    def __init__(
        self, ignored_steps: int = 0, priority: int = 10, tflop_per_step: int = 0, use_local: bool = False
    ) -> None:
        _only_defaults(
            "ThroughputHook",
            ignored_steps=(ignored_steps, 0),
            tflop_per_step=(tflop_per_step, 0),
            use_local=(use_local, False),
        )
        super().__init__()
        self.hook_priority = priority


class SaveCheckpointHook(ModelCheckpoint):
    """A committed, resumable checkpoint every `interval` epochs (every `interval` iterations with `save_by_iter`)
    in the directory or fsspec URL `checkpoint_dir`, keeping them all: the model, optimizer and LR schedulers with
    the run's state (`tracktrain.callbacks.ModelCheckpoint`). `model`, if given, must be the engine's model, which
    is what it saves."""

    def __init__(
        self,
        interval: int = 1,
        checkpoint_dir: str | None = None,
        model: nn.Module | None = None,
        save_by_iter: bool = False,
        priority: int = 10,
    ) -> None:
        if model is not None and not isinstance(model, nn.Module):
            raise TypeError(f"SaveCheckpointHook(model=...) takes the engine's torch.nn.Module, got {model!r}.")
        self.model = model
        super().__init__(
            dirpath=checkpoint_dir,
            save_top_k=None,
            every_n_epochs=None if save_by_iter else interval,
            every_n_train_steps=interval if save_by_iter else None,
        )
        self.hook_priority = priority

    def on_fit_start(self, trainer: Any, module: Any) -> None:
        engine_model = getattr(module, "model", None)
        if (
            self.model is not None
            and self.model is not engine_model
            and self.model is not getattr(engine_model, "module", None)
        ):
            raise ValueError(
                "SaveCheckpointHook(model=...) saves the engine's model with the run's state; the model given is "
                "another one. Leave model out (the engine's is saved)."
            )
        super().on_fit_start(trainer, module)


def _only_defaults(hook: str, **given_and_default: tuple[Any, Any]) -> None:
    """Refuse the Colossal-AI arguments these hooks do not implement, rather than ignore them."""
    for name, (given, default) in given_and_default.items():
        if given != default:
            raise ValueError(
                f"{hook}({name}={given!r}) is not supported: it reports after every epoch (and every evaluation). "
                f"Leave {name} at {default!r}, or use the callback it is built on with its own options."
            )


class TensorboardHook(Callback):
    """Colossal-AI's TensorboardHook: log the run's values to TensorBoard under `log_dir`, on the given `ranks`
    (each rank writes to `log_dir/rank_{rank}`)."""

    def __init__(
        self,
        log_dir: str | os.PathLike,
        ranks: Sequence[int] | None = None,
        parallel_mode: Any = None,
        priority: int = 10,
    ) -> None:
        """Colossal-AI's arguments: `ranks` None (every rank) or a list; `parallel_mode` the group `ranks` count
        in (Colossal-AI's `ParallelMode.GLOBAL` by default); `priority` the order among the Colossal Trainer's hooks."""
        if ranks is None:
            ranks = list(range(rank_and_world_size()[1]))
        if isinstance(ranks, int) or not all(isinstance(rank, int) for rank in ranks):
            raise TypeError(f"TensorboardHook(ranks=...) must be a list of ranks, e.g. [0], got {ranks!r}.")
        if list(ranks) != [0]:
            raise ValueError(
                f"TensorboardHook(ranks={list(ranks)}): values reach loggers on rank 0 only (one run per training "
                "job), so only ranks=[0] writes anything. Use ranks=[0]."
            )
        if parallel_mode is not None and getattr(parallel_mode, "value", None) != "global":
            raise ValueError(
                f"TensorboardHook(parallel_mode={parallel_mode}): ranks count among all processes here "
                "(ParallelMode.GLOBAL); leave parallel_mode out."
            )
        self.hook_priority = priority  # the order the Colossal Trainer hands its hooks over
        summary_writer()  # fail now, not at the first epoch, when tensorboard is missing
        self.log_dir = os.fspath(log_dir)
        self.ranks = list(ranks)
        self.logger: TensorBoardLogger | None = None

    def on_fit_start(self, trainer: Any, module: Any) -> None:
        rank = global_rank()
        if rank in self.ranks and self.logger is None:
            self.logger = TensorBoardLogger(log_dir=os.path.join(self.log_dir, f"rank_{rank}"))
            self.logger.start(trainer.default_root_dir)
            trainer.loggers.append(self.logger)

    def on_fit_end(self, trainer: Any, module: Any) -> None:
        self._close(trainer)

    def on_exception(self, trainer: Any, module: Any, exception: BaseException) -> None:
        self._close(trainer)

    def _close(self, trainer: Any) -> None:
        if self.logger is not None:
            self.logger.finalize()
            trainer.loggers.remove(self.logger)
            self.logger = None
