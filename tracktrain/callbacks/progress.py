"""`TrainerProgressBar`: a tqdm bar per training epoch showing the values logged with `prog_bar=True`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from tracktrain.callbacks.base import Callback
from tracktrain.distributed.logger import get_dist_logger
from tracktrain.distributed.ranks import global_rank
from tracktrain.engine.events import Events
from tracktrain.handlers.progress import ProgressBar, place_in_period
from tracktrain.trainer.metric_log import to_floats

if TYPE_CHECKING:
    from tracktrain.engine.engine import Engine
    from tracktrain.trainer.module import LoopModule
    from tracktrain.trainer.surface import TrainerSurface

__all__ = ["BAR_FORMAT", "TQDMProgressBar", "TrainerProgressBar"]

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
    within the epoch (`place_in_period`) are the handler's, so the bar and the lines agree.

    `refresh_rate` is Lightning's (`TQDMProgressBar(refresh_rate=N)`): the bar is redrawn (count and values read)
    every N batches of the epoch and at its end, whatever the time between, and where no bar is drawn the plain line
    comes at those batches instead of every `plain_every` seconds (so a log gets a line every N batches, as
    Lightning's bar writes a frame there); 0 turns the bar and the plain lines off (as `disable=True`). None (the
    default here): at most every `mininterval` seconds, as said above."""

    def __init__(
        self,
        persist: bool = True,
        plain_every: float | None = None,
        refresh_rate: int | None = None,
        **tqdm_kwargs: Any,
    ) -> None:
        name = type(self).__name__
        if plain_every is not None and refresh_rate is not None:
            raise TypeError(
                f"{name}: give refresh_rate= (a bar redraw, or a plain line, every N batches) or plain_every= (a "
                f"plain line every so many seconds), not both; got {refresh_rate!r} and {plain_every!r}."
            )
        plain_every = 30.0 if plain_every is None else plain_every
        if not isinstance(plain_every, (int, float)) or isinstance(plain_every, bool) or not plain_every > 0:
            raise ValueError(f"{name}(plain_every=...) must be a number of seconds > 0, got {plain_every!r}.")
        if refresh_rate is not None and (
            not isinstance(refresh_rate, int) or isinstance(refresh_rate, bool) or refresh_rate < 0
        ):
            raise ValueError(
                f"{name}(refresh_rate=...) must be a number of batches >= 0 (0 turns the bar off) or None, got "
                f"{refresh_rate!r}."
            )
        if refresh_rate is not None and ("mininterval" in tqdm_kwargs or "miniters" in tqdm_kwargs):
            raise TypeError(
                f"{name}(refresh_rate=...) decides when the bar redraws: drop mininterval=/miniters=, or refresh_rate."
            )
        if refresh_rate == 0:
            if tqdm_kwargs.get("disable") is False:
                raise ValueError(f"{name}(refresh_rate=0) turns the bar off, and disable=False asks for it: pick one.")
            tqdm_kwargs["disable"] = True
        elif refresh_rate is not None:
            # every refresh_rate-th batch redraws: not at most every 0.1 s, nor after as many updates as tqdm guesses
            tqdm_kwargs.update(mininterval=0, miniters=1)
        self.refresh_rate = refresh_rate
        self.bar = ProgressBar(persist=persist, **{"bar_format": BAR_FORMAT, **tqdm_kwargs})
        self.plain_every = float(plain_every)
        self._attached_to: Any = None
        self._epoch_started = (0.0, 0)  # time and iteration when the current epoch started
        self._next_line = 0.0

    def on_fit_start(self, trainer: TrainerSurface, module: LoopModule) -> None:
        if global_rank() != 0 or self._attached_to is trainer.train_engine:
            return
        # attached once for the lifetime of the engine: ProgressBar closes its own bars at the end of each run
        if self.draws_a_bar():
            rate = self.refresh_rate
            self.bar.attach(
                trainer.train_engine,
                output_transform=lambda _: to_floats(trainer.progress_bar_metrics),
                # the N-th, 2N-th, ... and the last batch of each epoch, as Lightning counts them
                event_name=Events.ITERATION_COMPLETED
                if not rate or rate == 1
                else Events.ITERATION_COMPLETED(event_filter=lambda engine, n: _due(engine, n, rate)),
            )
        elif self.bar.tqdm_kwargs.get("disable") is None:
            engine = trainer.train_engine
            self._epoch_started = (time.monotonic(), engine.state.iteration)  # a resume may start mid-epoch
            self._next_line = time.monotonic() + self.plain_every
            engine.add_event_handler(Events.EPOCH_STARTED, self._start_epoch)
            engine.add_event_handler(Events.ITERATION_COMPLETED, lambda: self._plain_line(trainer))
        self._attached_to = trainer.train_engine

    def draws_a_bar(self) -> bool:
        """Whether a bar is drawn (a terminal); else plain lines (`disable` aside). A bar of another kind says."""
        return self.bar.draws()

    def _start_epoch(self, engine: Engine) -> None:
        now = time.monotonic()
        self._epoch_started = (now, engine.state.iteration)
        self._next_line = max(self._next_line, now + self.plain_every)

    def _plain_line(self, trainer: TrainerSurface) -> None:
        now = time.monotonic()
        state = trainer.train_engine.state
        if self.refresh_rate:
            if not _due(trainer.train_engine, state.iteration, self.refresh_rate):
                return
        elif now < self._next_line:  # the one check per step: a clock read
            return
        self._next_line = now + self.plain_every
        started, first = self._epoch_started
        rate = (state.iteration - first) / max(now - started, 1e-9)  # over the steps this process ran
        length = state.epoch_length
        step = place_in_period(state.iteration, length)  # the bar's step: also right after a mid-epoch resume
        where = f"step {step}/{length} ({100 * step // length}%)" if length else f"step {step}"
        left = f" | {_duration((length - step) / rate)} left in the epoch" if length and rate > 0 else ""
        values = to_floats(trainer.progress_bar_metrics)  # a host sync, once a line
        shown = "".join(f" | {name}={value:.4g}" for name, value in values.items())
        get_dist_logger().info(f"Epoch {state.epoch}/{state.max_epochs} | {where} | {rate:.3g} it/s{left}{shown}")


class TQDMProgressBar(TrainerProgressBar):
    """Lightning's name and arguments for the Trainer's bar (`TrainerProgressBar`, whose other arguments it takes):
    redrawn every `refresh_rate` batches (0: off), at tqdm's `position=process_position`, the finished epoch's bar
    kept on screen with `leave=True` (ours: `persist`)."""

    def __init__(self, refresh_rate: int = 1, process_position: int = 0, leave: bool = False, **kwargs: Any) -> None:
        if "persist" in kwargs:
            raise TypeError("TQDMProgressBar takes Lightning's leave= (keep each finished bar): drop persist=.")
        if "position" in kwargs:
            raise TypeError("TQDMProgressBar takes Lightning's process_position= (tqdm's position): drop position=.")
        if not isinstance(process_position, int) or isinstance(process_position, bool) or process_position < 0:
            raise ValueError(f"TQDMProgressBar(process_position=...) must be an int >= 0, got {process_position!r}.")
        super().__init__(persist=bool(leave), refresh_rate=refresh_rate, position=process_position, **kwargs)


def _due(engine: Engine, iteration: int, rate: int) -> bool:
    """Whether the bar redraws after `iteration`: its step within the epoch is a multiple of `rate`, or the last."""
    length = engine.state.epoch_length
    step = place_in_period(iteration, length)
    return step % rate == 0 or step == length


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
