"""`TrainerProgressBar`: a tqdm bar per training epoch showing the values logged with `prog_bar=True`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from tracktrain.callbacks.base import Callback
from tracktrain.dist_logger import get_dist_logger
from tracktrain.engine.events import Events
from tracktrain.handlers.progress import ProgressBar, place_in_period
from tracktrain.ranks import global_rank
from tracktrain.trainer.metric_log import to_floats

if TYPE_CHECKING:
    from tracktrain.engine.engine import Engine
    from tracktrain.trainer.module import LoopModule
    from tracktrain.trainer.trainer import Trainer

__all__ = ["BAR_FORMAT", "TrainerProgressBar"]

# Ignite's bar (epoch, step, %, the values, elapsed<left) with the speed: `Epoch [2/5]: [30/100]  30%|███ ,
# train_loss=0.123 [00:03<00:07, 9.81it/s]`
BAR_FORMAT = "{desc}[{n_fmt}/{total_fmt}] {percentage:3.0f}%|{bar}{postfix} [{elapsed}<{remaining}, {rate_fmt}]"


class TrainerProgressBar(Callback):
    """The Trainer's progress bar, on `tracktrain.handlers.ProgressBar`: drawn only on a terminal (pass
    `disable=False` to force it), on rank 0, redrawn at most every `mininterval` seconds; values are read
    from the device only at a redraw. `tqdm_kwargs` go to tqdm.

    Where the output is not a terminal (a file, a CI log, a pipe), bar frames would be noise: instead, one plain
    line every `plain_every` seconds says the epoch, the step, the percentage, the speed, the time left and the
    progress-bar values (`disable=True` turns both off). Whether a bar is drawn (`ProgressBar.draws`) and the step
    within the epoch (`place_in_period`) are the handler's, so the bar and the lines agree."""

    def __init__(self, persist: bool = True, plain_every: float = 30.0, **tqdm_kwargs: Any) -> None:
        if not isinstance(plain_every, (int, float)) or isinstance(plain_every, bool) or not plain_every > 0:
            raise ValueError(
                f"TrainerProgressBar(plain_every=...) must be a number of seconds > 0, got {plain_every!r}."
            )
        self.bar = ProgressBar(persist=persist, **{"bar_format": BAR_FORMAT, **tqdm_kwargs})
        self.plain_every = float(plain_every)
        self._attached_to: Any = None
        self._epoch_started = (0.0, 0)  # time and iteration when the current epoch started
        self._next_line = 0.0

    def on_fit_start(self, trainer: Trainer, module: LoopModule) -> None:
        if global_rank() != 0 or self._attached_to is trainer.train_engine:
            return
        # attached once for the lifetime of the engine: ProgressBar closes its own bars at the end of each run
        if self.bar.draws():
            self.bar.attach(trainer.train_engine, output_transform=lambda _: to_floats(trainer.progress_bar_metrics))
        elif self.bar.tqdm_kwargs.get("disable") is None:
            engine = trainer.train_engine
            self._epoch_started = (time.monotonic(), engine.state.iteration)  # a resume may start mid-epoch
            self._next_line = time.monotonic() + self.plain_every
            engine.add_event_handler(Events.EPOCH_STARTED, self._start_epoch)
            engine.add_event_handler(Events.ITERATION_COMPLETED, lambda: self._plain_line(trainer))
        self._attached_to = trainer.train_engine

    def _start_epoch(self, engine: Engine) -> None:
        now = time.monotonic()
        self._epoch_started = (now, engine.state.iteration)
        self._next_line = max(self._next_line, now + self.plain_every)

    def _plain_line(self, trainer: Trainer) -> None:
        now = time.monotonic()
        if now < self._next_line:  # the one check per step: a clock read
            return
        self._next_line = now + self.plain_every
        state = trainer.train_engine.state
        started, first = self._epoch_started
        rate = (state.iteration - first) / max(now - started, 1e-9)  # over the steps this process ran
        length = state.epoch_length
        step = place_in_period(state.iteration, length)  # the bar's step: also right after a mid-epoch resume
        where = f"step {step}/{length} ({100 * step // length}%)" if length else f"step {step}"
        left = f" | {_duration((length - step) / rate)} left in the epoch" if length and rate > 0 else ""
        values = to_floats(trainer.progress_bar_metrics)  # a host sync, once a line
        shown = "".join(f" | {name}={value:.4g}" for name, value in values.items())
        get_dist_logger().info(f"Epoch {state.epoch}/{state.max_epochs} | {where} | {rate:.3g} it/s{left}{shown}")


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
