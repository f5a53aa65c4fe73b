"""`LearningRateMonitor`: the learning rate (and momentum) of every optimizer parameter group, as training goes."""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch

from tracktrain.callbacks.base import Callback
from tracktrain.callbacks.reporting import report
from tracktrain.engine.events import Events
from tracktrain.trainer.metric_log import to_floats

if TYPE_CHECKING:
    from tracktrain.trainer.optimizers import LRSchedulerConfig
    from tracktrain.trainer.surface import TrainerSurface

__all__ = ["LearningRateMonitor"]

_INTERVALS = ("step", "epoch", None)


class LearningRateMonitor(Callback):
    """Logs each parameter group's learning rate into `trainer.callback_metrics` and the Trainer's loggers.

    Names are Lightning's: `lr-{optimizer class}` (or the scheduler's `name` from `configure_optimizers`),
    with `-1`, `-2`, ... for further optimizers of the same class, and `/pg1`, `/pg2`, ... (or the group's
    `"name"`) when an optimizer has several parameter groups. Momentum (`betas[0]` for Adam-like optimizers)
    is logged as `{name}-momentum`; an optimizer without momentum logs 0.

    Args:
        logging_interval: "step": at the start of every `log_every_n_steps`-th optimizer step (the rate that
            step uses); "epoch": at the start of every epoch; None: per step for schedulers stepped per step,
            per epoch for those stepped per epoch, and both for optimizers without a scheduler.
        log_momentum: also log the momentum of each group.

    `lrs` holds every learning rate logged, by name.
    """

    def __init__(self, logging_interval: str | None = None, log_momentum: bool = False) -> None:
        if logging_interval not in _INTERVALS:
            raise ValueError(
                f'LearningRateMonitor(logging_interval=...) must be "step", "epoch" or None, got {logging_interval!r}.'
            )
        self.logging_interval = logging_interval
        self.log_momentum = bool(log_momentum)
        self.lrs: dict[str, list[float]] = {}
        self._logged_intervals = 0

    def event_handlers(self, trainer: TrainerSurface) -> Iterable[tuple[str, Any, Callable]]:
        """The step and/or epoch handler this configuration needs (all on the train engine: nothing is attached
        for validate(), test() or predict())."""
        configs = trainer.lr_scheduler_configs
        intervals = {config.interval for config in configs}
        scheduled = [getattr(config.scheduler, "optimizer", None) for config in configs]
        if any(not any(optimizer is seen for seen in scheduled) for optimizer in trainer.optimizers):
            intervals.add("both")  # an optimizer without a scheduler is logged at steps and epochs under None
        handlers: list[tuple[str, Any, Callable]] = [("fit", Events.STARTED, lambda: self._on_train_start(trainer))]
        if self.logging_interval == "step" or (self.logging_interval is None and intervals & {"step", "both"}):
            handlers.append(("fit", Events.ITERATION_STARTED, lambda: self._on_batch_start(trainer)))
        if self.logging_interval == "epoch" or (self.logging_interval is None and intervals & {"epoch", "both"}):
            handlers.append(("fit", Events.EPOCH_STARTED, lambda: self._log(trainer, "epoch")))
        return handlers

    def _on_train_start(self, trainer: TrainerSurface) -> None:
        groups = self._named_optimizers(trainer)  # refuses duplicate group names before the first step
        if self.log_momentum:
            without = [type(optimizer).__name__ for _, optimizer, _ in groups if not _has_momentum(optimizer)]
            if without:
                warnings.warn(
                    f"LearningRateMonitor(log_momentum=True), but {without} have no momentum; 0 is logged for them.",
                    RuntimeWarning,
                    stacklevel=2,
                )
        # counted from the global step after a checkpoint was loaded: a resumed run keeps its cadence
        self._logged_intervals = trainer.global_step // trainer.log_every_n_steps

    def _on_batch_start(self, trainer: TrainerSurface) -> None:
        # Once every log_every_n_steps optimizer steps, at the start of the step that ends an interval: the step
        # whose values the Trainer publishes. Counting whole intervals logs once per optimizer step under gradient
        # accumulation, and keeps the pace when one batch takes several steps (manual optimization).
        intervals = (trainer.global_step + 1) // trainer.log_every_n_steps
        if intervals > self._logged_intervals:
            self._logged_intervals = intervals
            self._log(trainer, "step")

    def _log(self, trainer: TrainerSurface, interval: str) -> None:
        values: dict[str, Any] = {}
        for names, optimizer, config in self._named_optimizers(trainer):
            if self.logging_interval is None and config is not None and config.interval != interval:
                continue  # under None, each scheduler's rates are logged at its own interval
            momentum_of = _momentum_reader(optimizer)
            for name, group in zip(names, optimizer.param_groups):
                values[name] = group["lr"]
                if self.log_momentum:
                    values[f"{name}-momentum"] = momentum_of(group)
        floats = to_floats(values)  # a tensor lr (capturable optimizers) is read here, once per log
        for name in values:
            if not name.endswith("-momentum"):
                self.lrs.setdefault(name, []).append(floats[name])
        report(trainer, floats)

    @staticmethod
    def _named_optimizers(
        trainer: TrainerSurface,
    ) -> list[tuple[list[str], torch.optim.Optimizer, LRSchedulerConfig | None]]:
        """`(names of its groups, optimizer, its scheduler config or None)`: scheduled optimizers first, in the
        order of `configure_optimizers`, then the optimizers without a scheduler."""
        entries: list[tuple[str, torch.optim.Optimizer, LRSchedulerConfig | None, bool]] = []
        for config in trainer.lr_scheduler_configs:
            optimizer = getattr(config.scheduler, "optimizer", None)
            if not isinstance(optimizer, torch.optim.Optimizer):
                raise TypeError(
                    f"LearningRateMonitor reads each LR scheduler's optimizer from scheduler.optimizer, but "
                    f"{type(config.scheduler).__name__} has {optimizer!r} there. Give the scheduler an `optimizer` "
                    "attribute (torch.optim.lr_scheduler schedulers have one)."
                )
            entries.append((config.name or f"lr-{type(optimizer).__name__}", optimizer, config, config.name is None))
        scheduled = [entry[1] for entry in entries]
        for optimizer in trainer.optimizers:
            if not any(optimizer is seen for seen in scheduled):
                entries.append((f"lr-{type(optimizer).__name__}", optimizer, None, True))

        named: list[tuple[list[str], torch.optim.Optimizer, LRSchedulerConfig | None]] = []
        unnamed_of_class: Counter[type] = Counter()
        for base, optimizer, scheduler_config, default_name in entries:
            if default_name:  # a second SGD without a given name is lr-SGD-1, a third lr-SGD-2
                unnamed_of_class[type(optimizer)] += 1
                count = unnamed_of_class[type(optimizer)]
                base = f"{base}-{count - 1}" if count > 1 else base
            named.append((_group_names(base, optimizer), optimizer, scheduler_config))
        return named


def _group_names(base: str, optimizer: torch.optim.Optimizer) -> list[str]:
    groups = optimizer.param_groups
    if len(groups) == 1:
        name = groups[0].get("name")
        return [f"{base}/{name}" if name else base]
    names = [str(group.get("name", f"pg{index}")) for index, group in enumerate(groups, start=1)]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(
            f"LearningRateMonitor names each parameter group of {base} by its 'name', but {repeated} name several "
            "groups. Give every param group of an optimizer its own name."
        )
    return [f"{base}/{name}" for name in names]


def _has_momentum(optimizer: torch.optim.Optimizer) -> bool:
    return "betas" in optimizer.defaults or "momentum" in optimizer.defaults


def _momentum_reader(optimizer: torch.optim.Optimizer) -> Callable[[dict], Any]:
    if "betas" in optimizer.defaults:
        return lambda group: group["betas"][0]
    return lambda group: group.get("momentum", 0.0)
