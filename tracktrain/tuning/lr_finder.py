"""`lr_find`: the learning-rate range test (Smith, "Cyclical Learning Rates", 2017; as fastai and Lightning run it).

The module's own optimizer takes up to `num_training` steps with the learning rate rising from `min_lr` to `max_lr`
(exponentially or linearly); the loss of each step is recorded, smoothed, and the sweep stops once the smoothed loss
passes `early_stop_threshold` × the best seen. The suggestion is the learning rate where the smoothed loss falls
fastest. The sweep is an ordinary fit of a temporary Trainer built from the user's (same precision, accumulation,
clipping, device and strategy), so it runs the very step a real fit runs; the module's weights, its optimizer's state
and the random generators are put back afterwards, so the next fit starts exactly as it would have without it.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from tracktrain.checks.numeric import is_integral, is_real
from tracktrain.loggers.base import Logger
from tracktrain.loggers.runs import TrackerRuns
from tracktrain.trainer.callback import Callback
from tracktrain.trainer.module import LoopModule, loss_in_output
from tracktrain.trainer.trainer import Trainer
from tracktrain.tuning.probe import OptimizerSnapshot, check_trainer_and_module, probe_trainer, restored

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from tracktrain.trainer.surface import TrainerSurface

__all__ = ["LRFinderResult", "lr_find"]

MODES = ("exponential", "linear")
PLOT_ARTIFACT_PATH = "lr_find"  # where the plot lands among a tracker run's artifacts
_LR_ATTRIBUTES = ("lr", "learning_rate")


@dataclass
class LRFinderResult:
    """What a sweep saw: `lrs[i]` is the learning rate of optimizer step i, `raw_losses[i]` that step's loss (the
    mean over its accumulation window) and `losses[i]` the same smoothed (a bias-corrected exponential moving
    average, `beta`). `diverged_at`: the learning rate whose step made the sweep stop early (smoothed loss above
    `early_stop_threshold` × the best, or not finite), None when it ran all its steps."""

    lrs: list[float]
    losses: list[float]
    raw_losses: list[float]
    mode: str
    diverged_at: float | None = None
    plot_path: str | None = field(default=None, repr=False)

    @property
    def results(self) -> dict[str, list[float]]:
        """Lightning's `lr_finder.results`: `{"lr": [...], "loss": [...]}` (the smoothed losses)."""
        return {"lr": list(self.lrs), "loss": list(self.losses)}

    def suggestion(self, skip_begin: int = 10, skip_end: int = 1) -> float:
        """The learning rate where the smoothed loss falls fastest (its most negative slope against log(lr), or
        against lr in linear mode), looking only at the descending part: from step `skip_begin` (the first steps'
        losses are noisy) up to the lowest smoothed loss, and never at the last `skip_end` steps (the divergence)."""
        end = len(self.losses) - skip_end
        if end - skip_begin < 2:
            raise ValueError(
                f"The sweep recorded {len(self.losses)} steps; suggestion(skip_begin={skip_begin}, skip_end={skip_end}) "
                "needs at least 2 between them. Run more steps (num_training=...), raise max_lr more slowly, or lower "
                "skip_begin."
            )
        window = self.losses[skip_begin:end]
        lowest = skip_begin + min(range(len(window)), key=window.__getitem__)
        last = max(lowest, skip_begin + 1)  # the descent: up to the lowest loss (two points at least)
        xs = [math.log(lr) if self.mode == "exponential" else lr for lr in self.lrs[skip_begin : last + 1]]
        slopes = _slopes(xs, self.losses[skip_begin : last + 1])
        steepest = min(range(len(slopes)), key=slopes.__getitem__)
        return self.lrs[skip_begin + steepest]

    def plot(self, suggest: bool = True) -> Figure:
        """The smoothed loss against the learning rate (log scale in exponential mode), the suggestion marked; a
        matplotlib Figure (not shown nor kept by pyplot: `fig.savefig(...)`, or display it in a notebook)."""
        from tracktrain.tuning.plotting import new_figure

        figure = new_figure()
        axes = figure.add_subplot()
        axes.plot(self.lrs, self.losses, label="smoothed loss")
        if self.mode == "exponential":
            axes.set_xscale("log")
        axes.set_xlabel("learning rate")
        axes.set_ylabel("loss")
        if suggest and len(self.losses) >= 4:
            try:
                lr = self.suggestion(skip_begin=min(10, len(self.losses) // 4))
            except ValueError:
                lr = None
            if lr is not None:
                axes.plot([lr], [self.losses[self.lrs.index(lr)]], "o", color="red", label=f"suggestion {lr:.2e}")
        axes.legend()
        return figure

    def save_plot(self, path: str | os.PathLike, suggest: bool = True) -> str:
        """Write `plot()` to `path` as a PNG; returns the path."""
        path = os.fspath(path)
        self.plot(suggest).savefig(path, format="png")
        return path


class _Sweep(Callback):
    """Sets each optimizer step's learning rate, records the step's loss, and stops the fit when the loss
    diverges or `num_training` steps are done (the Trainer's max_steps)."""

    def __init__(self, lrs: list[float], early_stop_threshold: float | None, beta: float) -> None:
        self.schedule = lrs
        self.early_stop_threshold = early_stop_threshold
        self.beta = beta
        self.lrs: list[float] = []
        self.raw_losses: list[float] = []
        self.losses: list[float] = []
        self.diverged_at: float | None = None
        self._window: list[torch.Tensor] = []
        self._average = 0.0
        self._best = math.inf

    def on_before_optimizer_step(
        self, trainer: TrainerSurface, module: LoopModule, optimizer: torch.optim.Optimizer
    ) -> None:
        lr = self.schedule[trainer.global_step]  # the step about to be taken: the LR only acts in optimizer.step()
        for group in optimizer.param_groups:
            group["lr"] = lr

    def on_train_batch_end(
        self, trainer: TrainerSurface, module: LoopModule, outputs: Any, batch: Any, idx: int
    ) -> None:
        loss, _ = loss_in_output(outputs)
        assert loss is not None  # the Trainer's step already refused a train_step without a loss
        self._window.append(loss.detach())
        step = trainer.global_step
        # the last batch of a window either stepped (global_step advanced) or was skipped as not finite
        stepped = step > len(self.lrs)
        # one host-device sync per batch: the sweep decides after every step whether to go on
        value = torch.stack([loss.float() for loss in self._window]).mean().item()
        if not stepped and math.isfinite(value):
            return  # inside an accumulation window
        self._window = []
        lr = self.schedule[len(self.lrs)]
        if not math.isfinite(value):
            self.diverged_at = lr
            trainer.stop()
            return
        self._average = self.beta * self._average + (1 - self.beta) * value
        smoothed = self._average / (1 - self.beta ** (len(self.lrs) + 1))
        self.lrs.append(lr)
        self.raw_losses.append(value)
        self.losses.append(smoothed)
        if (
            self.early_stop_threshold is not None
            and len(self.lrs) > 1
            and smoothed > self.early_stop_threshold * self._best
        ):
            self.diverged_at = lr
            trainer.stop()
        self._best = min(self._best, smoothed)


def lr_find(
    trainer: Trainer,
    module: LoopModule,
    train_dataloaders: Iterable[Any],
    min_lr: float = 1e-8,
    max_lr: float = 1.0,
    num_training: int = 100,
    mode: str = "exponential",
    early_stop_threshold: float | None = 4.0,
    update_attr: bool = False,
    beta: float = 0.98,
    log_plot: bool = True,
) -> LRFinderResult:
    """Sweep the learning rate of `module`'s optimizer (from its `configure_optimizers`) from `min_lr` to `max_lr` over
    up to `num_training` optimizer steps on `train_dataloaders`, run as a fit by a Trainer with `trainer`'s settings
    (no checkpoints, loggers or callbacks of its own); the module, its optimizer's state and the random generators
    come back as they were.

    Args:
        mode: "exponential" (each step's LR a constant factor above the last) or "linear".
        early_stop_threshold: stop once the smoothed loss exceeds this many times the best; None: never.
        update_attr: set the suggested LR on the module, as `module.lr` or `module.learning_rate` (whichever it has).
        beta: the smoothing of the loss (an exponential moving average, bias-corrected).
        log_plot: log the plot (a PNG in a temporary directory, `result.plot_path`) to `trainer`'s loggers that keep
            files (those implementing `log_artifact`; not a CSVLogger) under the artifact path "lr_find". Outside a
            fit their runs are closed, so they are opened for it and ended (FINISHED) again: a logger that had no
            run yet keeps the one it opened, which the next fit of `trainer` continues.

    Returns:
        An `LRFinderResult`: `.lrs`, `.losses`, `.suggestion()`, `.plot()`, `.save_plot(path)`.
    """
    check_trainer_and_module("lr_find", trainer, module)
    lrs = _schedule(min_lr, max_lr, num_training, mode)
    early_stop_threshold = _check_threshold(early_stop_threshold)
    if not (is_real(beta) and 0.0 <= beta < 1.0):
        raise ValueError(f"lr_find(beta=...) must be a number in [0, 1), got {beta!r}; 0.98 is the usual smoothing.")
    if not module.automatic_optimization:
        raise ValueError(
            f"lr_find needs automatic optimization (one optimizer stepped by the Trainer); {type(module).__name__} "
            "steps its optimizers itself (automatic_optimization = False). Sweep each optimizer's LR by hand instead."
        )
    attribute = _lr_attribute(module) if update_attr else None
    sweep = _Sweep(lrs, early_stop_threshold, float(beta))
    snapshot = OptimizerSnapshot()
    with restored(module, snapshot):
        probe = probe_trainer(trainer, [snapshot, sweep], max_steps=num_training)
        probe.fit(module, train_dataloaders)
    if not sweep.lrs:
        raise RuntimeError(
            f"lr_find recorded no step: the first step's loss at lr={lrs[0]:g} was not finite, or the loader is empty. "
            "Check the loss at a small learning rate (fit once) and the loader."
        )
    result = LRFinderResult(sweep.lrs, sweep.losses, sweep.raw_losses, mode, sweep.diverged_at)
    if attribute is not None:
        setattr(module, attribute, result.suggestion())
    # only trackers that keep files (a CSVLogger does not: no run is opened for it)
    keeping = [logger for logger in trainer.loggers if type(logger).log_artifact is not Logger.log_artifact]
    if log_plot and keeping:
        result.plot_path = _log_plot(keeping, trainer, result)
    return result


def _log_plot(loggers: list[Logger], trainer: Trainer, result: LRFinderResult) -> str:
    """Log the plot to `loggers`. Outside a fit their runs are closed: open them, log, end them. The PNG stays in a
    temporary directory (a tracker may upload it from its delivery thread until its run ends, or later from its
    outage buffer); its path is returned."""
    directory = tempfile.mkdtemp(prefix="tracktrain-lr-find-")
    path = result.save_plot(os.path.join(directory, "lr_find.png"))
    runs = TrackerRuns(loggers)
    runs.start(trainer.default_root_dir)
    for logger in loggers if runs.active else ():  # rank 0 only
        logger.log_artifact(path, PLOT_ARTIFACT_PATH, step=trainer.global_step)
    runs.finish()
    return path


def _schedule(min_lr: Any, max_lr: Any, num_training: Any, mode: Any) -> list[float]:
    """The learning rate of each step: `min_lr` first, `max_lr` last."""
    for name, value in (("min_lr", min_lr), ("max_lr", max_lr)):
        if not is_real(value) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"lr_find({name}=...) must be a finite number > 0, got {value!r}.")
    if min_lr >= max_lr:
        raise ValueError(
            f"lr_find(min_lr={min_lr!r}, max_lr={max_lr!r}): min_lr must be below max_lr (e.g. 1e-8 and 1.0)."
        )
    if not is_integral(num_training) or isinstance(num_training, bool) or num_training < 2:
        raise ValueError(f"lr_find(num_training=...) must be an integer >= 2 (optimizer steps), got {num_training!r}.")
    if mode not in MODES:
        raise ValueError(f"lr_find(mode=...) must be 'exponential' or 'linear', got {mode!r}.")
    n = int(num_training)
    if mode == "exponential":
        return [min_lr * (max_lr / min_lr) ** (i / (n - 1)) for i in range(n)]
    return [min_lr + (max_lr - min_lr) * i / (n - 1) for i in range(n)]


def _check_threshold(value: Any) -> float | None:
    if value is None:
        return None
    if not is_real(value) or isinstance(value, bool) or math.isnan(value) or value <= 1:
        raise ValueError(
            f"lr_find(early_stop_threshold=...) must be a number > 1 (times the best loss) or None, got {value!r}."
        )
    return float(value)


def _lr_attribute(module: LoopModule) -> str:
    for name in _LR_ATTRIBUTES:
        if hasattr(module, name):
            return name
    raise AttributeError(
        f"lr_find(update_attr=True) sets the suggested LR as module.lr or module.learning_rate, but "
        f"{type(module).__name__} has neither. Add `self.lr = ...` in __init__ and use it in configure_optimizers, or "
        "call lr_find without update_attr and read result.suggestion()."
    )


def _slopes(xs: list[float], ys: list[float]) -> list[float]:
    """dy/dx at each point: central differences inside, one-sided at the ends (numpy.gradient's first order)."""
    slopes = []
    for i in range(len(xs)):
        lo, hi = max(i - 1, 0), min(i + 1, len(xs) - 1)
        slopes.append((ys[hi] - ys[lo]) / (xs[hi] - xs[lo]))
    return slopes
