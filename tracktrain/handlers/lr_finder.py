"""The learning-rate range test on an Engine, as Ignite's `ignite.handlers.lr_finder.FastaiLRFinder`, and the one
suggestion rule it shares with the Trainer's `tracktrain.tuning.lr_find`: `steepest_descent`.

    lr_finder = FastaiLRFinder()
    with lr_finder.attach(trainer, to_save={"model": model, "optimizer": optimizer}) as finding:
        finding.run(train_loader)
    lr_finder.lr_suggestion(); lr_finder.plot(); lr_finder.apply_suggested_lr(optimizer)

The sweep is Ignite's, step for step (so a program gets the same rates, losses and suggestion): the optimizer's
rate grows from `start_lr` to `end_lr` over `num_iter` iterations (exponentially or linearly, through the
parameter schedulers of `tracktrain.handlers.param_scheduler`), each iteration's loss is smoothed (`smooth_f`) and
the run stops once it passes `diverge_th` times the best; `to_save` (and the trainer) are put back as they were
when the `with` block ends.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.optim import Optimizer

from tracktrain.distributed.collectives import all_reduce_tensor, is_distributed
from tracktrain.engine.engine import Engine
from tracktrain.engine.events import Events
from tracktrain.handlers.param_scheduler import ParamGroupScheduler, ParamScheduler, PiecewiseLinear

__all__ = ["FastaiLRFinder", "NoDescentError", "steepest_descent"]


class NoDescentError(RuntimeError, ValueError):
    """The sweep's losses do not descend over enough steps to suggest a rate (a RuntimeError, as Ignite's
    `lr_suggestion` raises; a ValueError, as `LRFinderResult.suggestion` does for a bad argument)."""


def steepest_descent(
    lrs: Sequence[Any], losses: Sequence[float], mode: str = "exponential", skip_begin: int = 0, skip_end: int = 0
) -> Any:
    """The learning rate where the loss falls fastest: of the steps from `skip_begin` to the lowest loss (never one
    of the last `skip_end`), the inner one with the most negative central slope of the loss against log(lr)
    (`mode="exponential"`) or lr ("linear"); with evenly spaced rates, Ignite's `lr_suggestion` exactly. An entry
    of `lrs` may be a list (one rate per param group): the first group's rate is the x axis, the entry is returned.
    """
    end = len(losses) - skip_end
    window = list(losses[skip_begin:end])
    if len(window) < 3:
        raise NoDescentError(
            f"The sweep recorded {len(losses)} steps; the suggestion (skipping {skip_begin} at the start and "
            f"{skip_end} at the end) needs at least 3 between them. Run more steps, raise the rate more slowly, or "
            "skip fewer."
        )
    lowest = min(range(len(window)), key=window.__getitem__)
    if lowest < 2:
        raise NoDescentError(
            "FastaiLRFinder got unexpected curve shape, the curve should be somehow U-shaped, please decrease "
            f"start_lr or increase end_lr to resolve this issue (the lowest loss is at step {skip_begin + lowest}: "
            "fewer than 3 steps descend to it)."
        )

    def x(i: int) -> float:
        lr = lrs[skip_begin + i]
        lr = lr[0] if isinstance(lr, (list, tuple)) else lr
        return math.log(lr) if mode == "exponential" else float(lr)

    slopes = {i: (window[i + 1] - window[i - 1]) / (x(i + 1) - x(i - 1)) for i in range(1, lowest)}
    steepest = min(slopes, key=slopes.__getitem__)
    return lrs[skip_begin + steepest]


class _ExponentialRate(ParamScheduler):
    """`start · (end / start) ** ((k + 1) / num_iter)` at call k, for each group: the rates of Ignite's exponential
    sweep (its torch scheduler, read through `get_lr()` one step ahead)."""

    def __init__(self, optimizer: Optimizer, start_lrs: list[float], end_lrs: list[float], num_iter: int) -> None:
        super().__init__(optimizer, "lr")
        self.start_lrs, self.end_lrs, self.num_iter = start_lrs, end_lrs, num_iter

    def get_param(self) -> float | list[float]:
        ratio = (self.event_index + 1) / self.num_iter
        lrs = [start * (end / start) ** ratio for start, end in zip(self.start_lrs, self.end_lrs)]
        return lrs[0] if len(lrs) == 1 else lrs


class FastaiLRFinder:
    """Ignite's learning-rate finder for a training Engine (see the module docstring).

    Attributes after a run: `get_results()` (`{"lr": [...], "loss": [...]}`, the smoothed losses),
    `lr_suggestion()`, `plot()`, `apply_suggested_lr(optimizer)`.
    """

    def __init__(self) -> None:
        self._diverge_flag = False
        self._history: dict[str, list[Any]] = {}
        self._best_loss: float | None = None
        self._schedule: ParamScheduler | ParamGroupScheduler | None = None
        self._mode = "exponential"
        self.logger = logging.getLogger(f"{__name__}.{type(self).__name__}")

    @contextlib.contextmanager
    def attach(
        self,
        trainer: Engine,
        to_save: Mapping[str, Any],
        output_transform: Callable[[Any], Any] = lambda output: output,
        num_iter: int | None = None,
        start_lr: float | list[float] | None = None,
        end_lr: float | list[float] | None = 10.0,
        step_mode: str = "exp",
        smooth_f: float = 0.05,
        diverge_th: float = 5.0,
    ) -> Iterator[Engine]:
        """Within the block, `trainer.run(...)` sweeps the rate of `to_save["optimizer"]`; on leaving it, every
        object of `to_save` and the trainer's state are as they were."""
        if not isinstance(trainer, Engine):
            raise TypeError(f"FastaiLRFinder.attach needs the training Engine, got {type(trainer).__name__}.")
        if not isinstance(to_save, Mapping):
            raise TypeError(f"Argument to_save should be a mapping, but given {type(to_save)}")
        for name, obj in to_save.items():
            for method in ("state_dict", "load_state_dict"):
                if not callable(getattr(obj, method, None)):
                    raise TypeError(f"Object {type(obj)} should have `{method}` method (to_save[{name!r}]).")
        if "optimizer" not in to_save:
            raise ValueError(f"Mapping to_save should contain 'optimizer' key, got {list(to_save)}.")
        optimizer = to_save["optimizer"]
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"Object to_save['optimizer'] should be torch optimizer, but given {type(optimizer)}")
        if not 0 <= smooth_f < 1:
            raise ValueError(f"smooth_f is outside the range [0, 1]: {smooth_f!r}")
        if diverge_th < 1:
            raise ValueError(f"diverge_th should be larger than 1, got {diverge_th!r}")
        if step_mode not in ("exp", "linear"):
            raise ValueError(f"step_mode should be 'exp' or 'linear', but given {step_mode}")
        if num_iter is not None:
            if isinstance(num_iter, bool) or not isinstance(num_iter, int):
                raise TypeError(f"if provided, num_iter should be an integer, but give {num_iter}")
            if num_iter <= 0:
                raise ValueError(f"if provided, num_iter should be positive, but give {num_iter}")
        groups = len(optimizer.param_groups)
        start_lrs = _per_group("start_lr", start_lr, groups, [group["lr"] for group in optimizer.param_groups])
        end_lrs = _per_group("end_lr", end_lr, groups, None)
        for start, end in zip(start_lrs, end_lrs):
            if start >= end:
                raise ValueError(f"start_lr must be less than end_lr, start_lr={start_lr} vs end_lr={end_lr}")

        saved = {name: copy.deepcopy(obj.state_dict()) for name, obj in to_save.items()}
        saved_trainer = copy.deepcopy(trainer.state_dict())
        arguments = (optimizer, output_transform, num_iter, start_lrs, end_lrs, step_mode, smooth_f, diverge_th)
        handles = [
            trainer.add_event_handler(Events.STARTED, self._run, *arguments),
            trainer.add_event_handler(Events.COMPLETED, self._warning),
            trainer.add_event_handler(Events.COMPLETED, self._reset),
        ]
        try:
            yield trainer
        finally:
            for handle in handles:
                handle.remove()
            trainer.load_state_dict(saved_trainer)
            for name, obj in to_save.items():
                obj.load_state_dict(saved[name])

    def _run(
        self,
        trainer: Engine,
        optimizer: Optimizer,
        output_transform: Callable[[Any], Any],
        num_iter: int | None,
        start_lrs: list[float],
        end_lrs: list[float],
        step_mode: str,
        smooth_f: float,
        diverge_th: float,
    ) -> None:
        self._history = {"lr": [], "loss": []}
        self._best_loss = None
        self._diverge_flag = False
        state = trainer.state
        if state.epoch_length is None or state.max_epochs is None:
            raise ValueError(
                "FastaiLRFinder needs the run's epoch_length and max_epochs: run the trainer with max_epochs (and "
                "epoch_length for data without a length)."
            )
        planned = state.epoch_length * state.max_epochs
        if num_iter is None:
            num_iter = planned
        elif planned < num_iter:
            state.max_iters = num_iter  # as Ignite: the run is extended to sweep num_iter iterations
            state.max_epochs = math.ceil(num_iter / state.epoch_length)
        self.logger.debug("Running LR finder for %d iterations", num_iter)
        self._mode = "exponential" if step_mode == "exp" else "linear"
        if step_mode == "exp":
            # Ignite's torch scheduler takes its first step when made, from the optimizer's rates (not start_lr): the
            # first iteration trains one step into the sweep
            for group, end in zip(optimizer.param_groups, end_lrs):
                group["lr"] = group["lr"] * (end / group["lr"]) ** (1 / num_iter)
            self._schedule = _ExponentialRate(optimizer, start_lrs, end_lrs, num_iter)
        elif len(start_lrs) == 1:
            self._schedule = PiecewiseLinear(optimizer, "lr", [(0, start_lrs[0]), (num_iter, end_lrs[0])])
        else:
            self._schedule = ParamGroupScheduler(
                [
                    PiecewiseLinear(optimizer, "lr", [(0, start), (num_iter, end)], param_group_index=i)
                    for i, (start, end) in enumerate(zip(start_lrs, end_lrs))
                ]
            )
        trainer.add_event_handler(Events.ITERATION_COMPLETED, self._reached_num_iterations, num_iter)
        trainer.add_event_handler(
            Events.ITERATION_COMPLETED, self._log_lr_and_loss, output_transform, smooth_f, diverge_th
        )
        trainer.add_event_handler(Events.ITERATION_COMPLETED, self._schedule)

    def _log_lr_and_loss(
        self, trainer: Engine, output_transform: Callable[[Any], Any], smooth_f: float, diverge_th: float
    ) -> None:
        loss = output_transform(trainer.state.output)
        if isinstance(loss, torch.Tensor):
            if loss.numel() != 1 or loss.ndim > 1:
                raise ValueError(
                    "if output of the engine is torch.Tensor, then it must be 0d torch.Tensor or 1d torch.Tensor "
                    f"with 1 element, but got torch.Tensor of shape {loss.shape}."
                )
            loss = loss.item()  # host sync: the sweep decides after every iteration whether to go on
        elif not isinstance(loss, float):
            raise TypeError(
                "output of the engine should be of type float or 0d torch.Tensor or 1d torch.Tensor with 1 element, "
                f"but got output of type {type(loss).__name__}: pass output_transform to pick the loss, e.g. "
                "lr_finder.attach(trainer, to_save, output_transform=lambda out: out['train_loss'])."
            )
        if is_distributed():  # as Ignite: summed over the processes
            loss = all_reduce_tensor(torch.tensor(loss, dtype=torch.float64), "sum").item()
        assert self._schedule is not None
        self._history["lr"].append(self._schedule.get_param())
        if trainer.state.iteration != 1 and smooth_f > 0:
            loss = smooth_f * loss + (1 - smooth_f) * self._history["loss"][-1]
        if self._best_loss is None or loss < self._best_loss:
            self._best_loss = loss
        self._history["loss"].append(loss)
        if loss > diverge_th * self._best_loss:
            self._diverge_flag = True
            self.logger.info("Stopping early, the loss has diverged")
            trainer.terminate()

    def _reached_num_iterations(self, trainer: Engine, num_iter: int) -> None:
        if trainer.state.iteration > num_iter:
            trainer.terminate()

    def _warning(self) -> None:
        if not self._diverge_flag:
            warnings.warn(
                "Run completed without loss diverging, increase end_lr, decrease diverge_th or look at "
                "lr_finder.plot()",
                UserWarning,
                stacklevel=2,
            )

    def _reset(self, trainer: Engine) -> None:
        self.logger.debug("Completed LR finder run")
        for handler in (self._schedule, self._log_lr_and_loss, self._reached_num_iterations):
            if handler is not None and trainer.has_event_handler(handler, Events.ITERATION_COMPLETED):
                trainer.remove_event_handler(handler, Events.ITERATION_COMPLETED)

    def get_results(self) -> dict[str, list[Any]]:
        """`{"lr": [...], "loss": [...]}` of the last sweep (the smoothed losses)."""
        return self._history

    def lr_suggestion(self) -> Any:
        """The rate where the smoothed loss falls fastest before its lowest point (`steepest_descent`); a list with
        one rate per param group when the optimizer has several."""
        if not self._history:
            raise RuntimeError("learning rate finder didn't run yet so lr_suggestion can't be returned")
        return steepest_descent(self._history["lr"], self._history["loss"], self._mode)

    def apply_suggested_lr(self, optimizer: Optimizer) -> None:
        """Set the suggested rate(s) on `optimizer`'s param groups."""
        suggested = self.lr_suggestion()
        rates = suggested if isinstance(suggested, list) else [suggested]
        if len(rates) != len(optimizer.param_groups):
            raise RuntimeError(
                "The number of parameter groups does not match between given optimizer and the one used for "
                f"estimating the learning rate: {len(rates)} vs {len(optimizer.param_groups)}"
            )
        for group, rate in zip(optimizer.param_groups, rates):
            group["lr"] = rate

    def plot(
        self,
        skip_start: int = 10,
        skip_end: int = 5,
        log_lr: bool = True,
        display_suggestion: bool = True,
        ax: Any | None = None,
        **kwargs: Any,
    ) -> Any:
        """The smoothed loss against the rate (matplotlib), the suggestion marked; returns the axes."""
        try:
            from matplotlib import pyplot as plt
        except ImportError as error:
            raise ModuleNotFoundError(
                f"This method requires matplotlib to be installed ({error}): pip install matplotlib"
            ) from error
        if not self._history:
            raise RuntimeError("learning rate finder didn't run yet so results can't be plotted")
        if skip_start < 0:
            raise ValueError(f"skip_start cannot be negative, got {skip_start}")
        if skip_end < 0:
            raise ValueError(f"skip_end cannot be negative, got {skip_end}")
        lrs, losses = self._history["lr"], self._history["loss"]
        groups = len(lrs[0]) if isinstance(lrs[0], list) else 1
        if ax is None:
            _, ax = plt.subplots(**kwargs)
        if display_suggestion:
            suggested = self.lr_suggestion()
            index = lrs.index(suggested)
            if skip_start >= index:
                warnings.warn(
                    "skip_start is larger than the suggested LR found and it will not be visible on the plot. "
                    "Please, make the value smaller.",
                    UserWarning,
                    stacklevel=2,
                )
            for rate in suggested if isinstance(suggested, list) else [suggested]:
                ax.scatter(rate, losses[index], color="red" if groups == 1 else None, s=75, marker="o", zorder=3)
        stop = len(lrs) - skip_end
        lrs, losses = lrs[skip_start:stop], losses[skip_start:stop]
        plt.legend([f"suggested lr for param_groups {i}" for i in range(groups)])
        ax.plot(lrs, losses)
        if log_lr:
            ax.set_xscale("log")
        first, last = lrs[0], lrs[-1]
        ax.set_xlim([min(first) if isinstance(first, list) else first, max(last) if isinstance(last, list) else last])
        ax.set_xlabel("Learning rate")
        ax.set_ylabel("Loss")
        plt.show()
        return ax


def _per_group(name: str, value: Any, groups: int, default: list[float] | None) -> list[float]:
    if value is None and default is not None:
        return default
    if isinstance(value, float):
        return [value] * groups
    if isinstance(value, list):
        if len(value) != groups:
            raise ValueError(
                f"Number of values of {name} should be equal to optimizer values.{name} values:{len(value)} "
                f"optimizer values: {groups}"
            )
        return value
    raise TypeError(f"{name} should be a float or list of floats, but given {type(value)}")
