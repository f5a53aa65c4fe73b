"""Lightning's Rich callbacks: `RichProgressBar` (the Trainer's bar drawn with `rich`) and `RichModelSummary` (the
model summary as a `rich` table). `rich` is an extra: `pip install 'tracktrain[rich]'`; without it, building one says
so. Where the output is not a terminal, the bar writes the same plain lines as the Trainer's default bar."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tracktrain.callbacks.model_summary import ModelSummary
from tracktrain.callbacks.progress import TrainerProgressBar
from tracktrain.distributed.ranks import global_rank
from tracktrain.handlers.progress import place_in_period
from tracktrain.trainer.metric_log import to_floats

if TYPE_CHECKING:
    from tracktrain.trainer.module import LoopModule
    from tracktrain.trainer.surface import TrainerSurface

__all__ = ["RichModelSummary", "RichProgressBar", "RichProgressBarTheme"]


def _rich(caller: str) -> Any:
    try:
        return importlib.import_module("rich")
    except ImportError:
        raise ImportError(f"{caller} draws with rich, which is not installed: pip install 'tracktrain[rich]'") from None


@dataclass
class RichProgressBarTheme:
    """Lightning's styles of the bar's parts (rich style strings)."""

    description: str = ""
    progress_bar: str = "#6206E0"
    progress_bar_finished: str = "#6206E0"
    progress_bar_pulse: str = "#6206E0"
    batch_progress: str = ""
    time: str = "dim"
    processing_speed: str = "dim underline"
    metrics: str = "italic"


class RichProgressBar(TrainerProgressBar):
    """Lightning's `RichProgressBar(refresh_rate=1, leave=False, theme=RichProgressBarTheme(), console_kwargs=None)`:
    a rich bar per training epoch, the values logged with `prog_bar=True` beside it, redrawn every `refresh_rate`
    batches (0: off); `leave` keeps each finished epoch's bar on screen."""

    def __init__(
        self,
        refresh_rate: int = 1,
        leave: bool = False,
        theme: RichProgressBarTheme | None = None,
        console_kwargs: dict[str, Any] | None = None,
    ) -> None:
        _rich("RichProgressBar")
        super().__init__(persist=bool(leave), refresh_rate=refresh_rate)
        self.theme = theme or RichProgressBarTheme()
        self.console_kwargs = dict(console_kwargs or {})
        self.leave = bool(leave)
        self._progress: Any = None
        self._terminal = False
        self._task: Any = None

    def on_fit_start(self, trainer: TrainerSurface, module: LoopModule) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        console = Console(**self.console_kwargs)
        self._terminal = console.is_terminal
        if not self._terminal:  # a file, a CI log: the default bar's plain lines, not frames
            super().on_fit_start(trainer, module)
            return
        if global_rank() != 0:
            return

        self._progress = Progress(
            TextColumn("[progress.description]{task.description}", style=self.theme.description),
            BarColumn(complete_style=self.theme.progress_bar, finished_style=self.theme.progress_bar_finished),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[metrics]}", style=self.theme.metrics),
            console=console,
            transient=not self.leave,
        )
        self._progress.start()

    def draws_a_bar(self) -> bool:
        return False  # never tqdm's: rich draws on a terminal (see on_fit_start), plain lines elsewhere

    def on_train_epoch_start(self, trainer: TrainerSurface, module: LoopModule) -> None:
        if self._progress is None:
            return
        state = trainer.train_engine.state
        description = f"Epoch {trainer.current_epoch}/{(trainer.max_epochs or 0) - 1}"
        self._task = self._progress.add_task(description, total=state.epoch_length, metrics="")

    def on_train_batch_end(
        self, trainer: TrainerSurface, module: LoopModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._progress is None or self._task is None:
            return
        state = trainer.train_engine.state
        step = place_in_period(state.iteration, state.epoch_length)
        if self.refresh_rate and step % self.refresh_rate and step != state.epoch_length:
            return
        values = to_floats(trainer.progress_bar_metrics)  # a host sync, once a redraw
        shown = " ".join(f"{name}: {value:.3g}" for name, value in values.items())
        self._progress.update(self._task, completed=step, metrics=shown)

    def on_fit_end(self, trainer: TrainerSurface, module: LoopModule) -> None:
        self._stop()

    def on_exception(self, trainer: TrainerSurface, module: LoopModule, exception: BaseException) -> None:
        self._stop()

    def _stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress, self._task = None, None


class RichModelSummary(ModelSummary):
    """Lightning's `RichModelSummary(max_depth=1)`: the model summary (`ModelSummary`'s numbers) as a rich table,
    printed on rank 0 at the fit's start."""

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        _rich("RichModelSummary")
        if summarize_kwargs:
            raise TypeError(f"RichModelSummary takes max_depth only here, got {sorted(summarize_kwargs)}.")
        super().__init__(max_depth)

    def on_fit_start(self, trainer: TrainerSurface, module: Any) -> None:
        super().on_fit_start(trainer, module)
        if global_rank() != 0 or self.last is None:
            return
        from rich.console import Console
        from rich.table import Table

        table = Table(header_style="bold magenta")
        for heading in ("", "Name", "Type", "Params", "Trainable"):
            table.add_column(heading)
        for index, layer in enumerate(self.last.layers):
            table.add_row(str(index), layer.name, layer.kind, f"{layer.parameters:,}", f"{layer.trainable:,}")
        console = Console()
        console.print(table)
        console.print(
            f"Trainable params: {self.last.trainable_parameters:,}\n"
            f"Non-trainable params: {self.last.frozen_parameters:,}\n"
            f"Total params: {self.last.total_parameters:,}\n"
            f"Total estimated model params size (MB): {self.last.total_bytes / 1e6:.3f}"
        )
