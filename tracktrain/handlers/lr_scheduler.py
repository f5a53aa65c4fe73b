"""`LRScheduler`: step a `torch.optim.lr_scheduler` scheduler from Engine events."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from torch import Tensor
from torch.optim.lr_scheduler import LRScheduler as TorchLRScheduler
from torch.optim.lr_scheduler import ReduceLROnPlateau

from tracktrain.engine.engine import Engine

__all__ = ["LRScheduler"]

# Events that fire before the iteration's optimizer step: stepping the scheduler there skips its first value.
_BEFORE_OPTIMIZER_STEP = frozenset({"ITERATION_STARTED", "EPOCH_STARTED", "STARTED"})


class LRScheduler:
    """Calls `lr_scheduler.step()` each time its event fires: attach it after the optimizer step.

    .. code-block:: python

        scheduler = LRScheduler(torch.optim.lr_scheduler.StepLR(optimizer, step_size=30, gamma=0.1))
        trainer.add_event_handler(Events.ITERATION_COMPLETED, scheduler)  # or EPOCH_COMPLETED, per epoch

    This is torch's own order (`optimizer.step()` then `scheduler.step()`), so the learning rate of each
    iteration is exactly what a hand-written loop gets. Ignite's `LRScheduler` aims at the same learning
    rates from `Events.ITERATION_STARTED` by recomputing them with `get_lr()` instead of calling `step()`,
    which with recent torch skips the first value of `ExponentialLR` and `CosineAnnealingWarmRestarts` and
    fails on `SequentialLR`; here the scheduler's own `step()` runs, so every torch scheduler behaves as
    torch documents it. Attaching to a *_STARTED event is refused on the first call because it
    would skip the first learning rate.

    Args:
        lr_scheduler: a `torch.optim.lr_scheduler` scheduler (not `ReduceLROnPlateau`, which needs a metric).
        save_history: append, before each step, the learning rates just used (one list per call, one value per
            param group) to `engine.state.param_history["lr"]`, as Ignite does.

    Not included: Ignite's own schedulers (linear/cosine/piecewise/concat `ParamScheduler`s, warm-up helper)
    and `simulate_values`; torch's schedulers cover these (`LinearLR`, `CosineAnnealingLR`, `SequentialLR`).
    """

    def __init__(self, lr_scheduler: TorchLRScheduler, save_history: bool = False) -> None:
        if isinstance(lr_scheduler, ReduceLROnPlateau):
            raise TypeError(
                "LRScheduler cannot drive ReduceLROnPlateau: its step() needs the monitored metric. Call "
                "scheduler.step(engine.state.metrics[...]) from an evaluator's COMPLETED handler instead."
            )
        if not isinstance(lr_scheduler, TorchLRScheduler):
            raise TypeError(
                f"Argument lr_scheduler should be a subclass of torch.optim.lr_scheduler.LRScheduler, but given "
                f"{type(lr_scheduler)}: pass a scheduler such as StepLR(optimizer, ...) (got {lr_scheduler!r})."
            )
        self.lr_scheduler = lr_scheduler
        self.optimizer = lr_scheduler.optimizer
        self.param_name = "lr"
        self.save_history = bool(save_history)
        self.event_index = 0  # number of steps taken through this handler
        self._event_checked = False

    def __call__(self, engine: Engine | None = None, name: str | None = None) -> None:
        """Step the scheduler; with `save_history`, first record the learning rates the last iteration used."""
        if engine is not None:
            if not self._event_checked:
                self._check_event(engine)
            if self.save_history:
                history = getattr(engine.state, "param_history", None)
                if history is None:
                    history = engine.state.param_history = {}
                history.setdefault(name or self.param_name, []).append(
                    [group[self.param_name] for group in self.optimizer.param_groups]
                )
        self.lr_scheduler.step()
        self.event_index += 1

    def _check_event(self, engine: Engine) -> None:
        event = engine.last_event_name
        event_name = getattr(event, "name", event)
        if event_name in _BEFORE_OPTIMIZER_STEP:
            raise RuntimeError(
                f"LRScheduler was fired by {event_name}, before the optimizer step of the iteration, so the "
                "schedule's first learning rate would be skipped. Attach it to Events.ITERATION_COMPLETED (or "
                "Events.EPOCH_COMPLETED for a schedule counted in epochs): it calls the scheduler's step(), "
                "unlike Ignite's LRScheduler, which is attached to ITERATION_STARTED."
            )
        self._event_checked = True

    def get_param(self) -> float | Tensor | list[float | Tensor]:
        """The learning rate(s) the next iteration will use: one value, or one per param group (a tensor where
        the optimizer was given a tensor learning rate)."""
        lrs = self.lr_scheduler.get_last_lr()
        return lrs[0] if len(lrs) == 1 else list(lrs)

    def state_dict(self) -> OrderedDict[str, Any]:
        """The step count and the wrapped scheduler's own `state_dict()` (the optimizer is saved separately)."""
        return OrderedDict(
            [
                ("event_index", self.event_index),
                ("param_name", self.param_name),
                ("save_history", self.save_history),
                ("lr_scheduler", self.lr_scheduler.state_dict()),
            ]
        )

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore from `state_dict()`; load the optimizer's own state_dict too, so its lr matches."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(
                f"LRScheduler.load_state_dict expects the dict returned by state_dict(), "
                f"got {type(state_dict).__name__}."
            )
        missing = [key for key in ("event_index", "lr_scheduler") if key not in state_dict]
        if missing:
            raise ValueError(
                f"Required state attribute(s) {missing} are absent in provided state_dict {list(state_dict)}; "
                "pass the dict returned by LRScheduler.state_dict()."
            )
        self.lr_scheduler.load_state_dict(state_dict["lr_scheduler"])
        self.event_index = int(state_dict["event_index"])
        self.save_history = bool(state_dict.get("save_history", self.save_history))
