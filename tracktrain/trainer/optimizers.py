"""What `configure_optimizers` returns, read into optimizers and scheduler configurations, and the stepping of
those schedulers by step or by epoch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tracktrain.checks.numeric import is_integral
from tracktrain.trainer.monitor import monitored_value

__all__ = ["LRSchedulerConfig", "parse_optimizers"]

_FORMS = (
    "configure_optimizers must return an optimizer; a list of optimizers; (optimizers, schedulers); a dict "
    '{"optimizer": opt, "lr_scheduler": scheduler or {"scheduler": s, "interval": "step"|"epoch", "frequency": n, '
    '"monitor": name}} (Lightning\'s top-level "monitor" too); or a list of such dicts'
)
_SCHEDULER_KEYS = {"scheduler", "interval", "frequency", "monitor", "name", "strict"}


@dataclass
class LRSchedulerConfig:
    """An LR scheduler and when it steps: every `frequency` optimizer steps ("step") or epochs ("epoch").

    `monitor` names the logged metric passed to `step()` (needed by ReduceLROnPlateau); with `strict`, a
    monitored metric that was never logged is an error, otherwise that step is skipped.
    """

    scheduler: Any
    interval: str = "epoch"
    frequency: int = 1
    monitor: str | None = None
    name: str | None = None
    strict: bool = True

    def __post_init__(self) -> None:
        if not callable(getattr(self.scheduler, "step", None)):
            raise TypeError(f"{_FORMS}. The scheduler {self.scheduler!r} has no step() method.")
        if self.interval not in ("step", "epoch"):
            raise ValueError(f'A scheduler\'s "interval" must be "step" or "epoch", got {self.interval!r}.')
        if not is_integral(self.frequency) or isinstance(self.frequency, bool) or self.frequency < 1:
            raise ValueError(f'A scheduler\'s "frequency" must be a positive integer, got {self.frequency!r}.')
        if isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau) and self.monitor is None:
            raise ValueError(
                "ReduceLROnPlateau needs a metric: return {'optimizer': opt, 'lr_scheduler': {'scheduler': s, "
                "'monitor': 'val_loss'}} from configure_optimizers, naming a metric you log."
            )

    def step(self, metrics: Mapping[str, Any]) -> None:
        """Step the scheduler, with the monitored metric when there is one."""
        if self.monitor is None:
            self.scheduler.step()
            return
        if self.monitor not in metrics and not self.strict:
            return
        self.scheduler.step(monitored_value(metrics, self.monitor, "The LR scheduler"))  # a sync per scheduler step


def parse_optimizers(returned: Any) -> tuple[list[torch.optim.Optimizer], list[LRSchedulerConfig]]:
    """Read what `configure_optimizers` returned into `(optimizers, scheduler configurations)`."""
    if isinstance(returned, torch.optim.Optimizer):
        return [returned], []
    if isinstance(returned, Mapping):
        return _parse_dicts([returned])
    if isinstance(returned, Sequence) and not isinstance(returned, str) and len(returned) > 0:
        if all(isinstance(item, Mapping) for item in returned):
            return _parse_dicts(list(returned))
        if all(isinstance(item, torch.optim.Optimizer) for item in returned):
            return list(returned), []
        if len(returned) == 2 and all(isinstance(part, (Sequence, torch.optim.Optimizer)) for part in returned):
            optimizers, schedulers = (_as_list(part) for part in returned)
            if optimizers and all(isinstance(item, torch.optim.Optimizer) for item in optimizers):
                return optimizers, [_scheduler_config(item) for item in schedulers]
    raise TypeError(f"{_FORMS}; got {_describe(returned)}.")


def _parse_dicts(entries: list[Mapping]) -> tuple[list[torch.optim.Optimizer], list[LRSchedulerConfig]]:
    optimizers, schedulers = [], []
    for entry in entries:
        unknown = set(entry) - {"optimizer", "lr_scheduler", "monitor"}
        if unknown:
            raise ValueError(f"{_FORMS}. Unknown key(s) {sorted(unknown)} in {entry!r}.")
        optimizer = entry.get("optimizer")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"{_FORMS}; the 'optimizer' entry is {_describe(optimizer)}.")
        optimizers.append(optimizer)
        scheduler = entry.get("lr_scheduler")
        if scheduler is not None:
            # Lightning's top-level "monitor": the scheduler's unless its own dict names one
            if entry.get("monitor") is not None:
                scheduler = {
                    "monitor": entry["monitor"],
                    **(scheduler if isinstance(scheduler, Mapping) else {"scheduler": scheduler}),
                }
            schedulers.append(_scheduler_config(scheduler))
        elif entry.get("monitor") is not None:
            raise ValueError(
                f"configure_optimizers returned a 'monitor' ({entry['monitor']!r}) without an 'lr_scheduler' to "
                "step with it: add the scheduler, or leave the monitor out."
            )
    return optimizers, schedulers


def _scheduler_config(item: Any) -> LRSchedulerConfig:
    if isinstance(item, Mapping):
        unknown = set(item) - _SCHEDULER_KEYS
        if unknown or "scheduler" not in item:
            raise ValueError(
                f"A scheduler dict needs 'scheduler' and may have {sorted(_SCHEDULER_KEYS - {'scheduler'})}; got "
                f"keys {sorted(item)}."
            )
        return LRSchedulerConfig(**item)
    return LRSchedulerConfig(item)


def _as_list(part: Any) -> list:
    return [part] if isinstance(part, torch.optim.Optimizer) or not isinstance(part, Sequence) else list(part)


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"[:200]
