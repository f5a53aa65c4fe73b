"""`TrainerProgressBar`: a tqdm bar per training epoch showing the values logged with `prog_bar=True`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracktrain.callbacks.base import Callback
from tracktrain.ranks import global_rank
from tracktrain.trainer.metric_log import to_floats

if TYPE_CHECKING:
    from tracktrain.trainer.module import LoopModule
    from tracktrain.trainer.trainer import Trainer

__all__ = ["TrainerProgressBar"]


class TrainerProgressBar(Callback):
    """The Trainer's progress bar, on `tracktrain.handlers.ProgressBar`: drawn only on a terminal (pass
    `disable=False` to force it), on rank 0, redrawn at most every `mininterval` seconds; values are read
    from the device only at a redraw. `tqdm_kwargs` go to tqdm."""

    def __init__(self, persist: bool = True, **tqdm_kwargs: Any) -> None:
        from tracktrain.handlers.progress import ProgressBar

        self.bar = ProgressBar(persist=persist, **tqdm_kwargs)
        self._attached_to: Any = None

    def on_fit_start(self, trainer: Trainer, module: LoopModule) -> None:
        if global_rank() != 0 or self._attached_to is trainer.train_engine:
            return
        # attached once for the lifetime of the engine: ProgressBar closes its own bars at the end of each run
        self.bar.attach(trainer.train_engine, output_transform=lambda _: to_floats(trainer.progress_bar_metrics))
        self._attached_to = trainer.train_engine

