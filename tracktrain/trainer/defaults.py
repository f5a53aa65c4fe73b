"""What a Trainer gets when it is not told otherwise: a progress bar, a `ModelCheckpoint` under
`default_root_dir/checkpoints`, a `ModelSummary`, Lightning's default logger (TensorBoard's when the tensorboard
package is installed, else a `CSVLogger`), and the bridge to the loggers.

The one module of the trainer layer that names parts of the layers above it (callbacks, loggers): those are the
product's defaults, chosen here; everything else in the Trainer reaches them through the `Callback`,
`Checkpointer` and `Logger` seams.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

from tracktrain import storage
from tracktrain.callbacks.model_checkpoint import ModelCheckpoint
from tracktrain.callbacks.model_summary import ModelSummary
from tracktrain.callbacks.progress import TrainerProgressBar
from tracktrain.loggers.base import Logger
from tracktrain.loggers.bridge import LoggerBridge
from tracktrain.loggers.csv_logger import CSVLogger
from tracktrain.loggers.tensorboard_logger import TensorBoardLogger
from tracktrain.trainer import arguments
from tracktrain.trainer.callback import Callback

__all__ = ["default_callbacks", "default_logger", "logger_bridge", "loggers_from", "tensorboard_installed"]


def default_callbacks(
    given: list[Callback], root_dir: str, progress_bar: bool, checkpointing: bool, model_summary: bool = True
) -> list[Callback]:
    """The callbacks to add to `given`: a progress bar, a checkpoint callback and a model summary, unless given or
    switched off."""
    defaults: list[Callback] = []
    if model_summary and not any(isinstance(c, ModelSummary) for c in given):
        defaults.append(ModelSummary())
    if progress_bar and not any(isinstance(c, TrainerProgressBar) for c in given):
        defaults.append(TrainerProgressBar())
    if checkpointing and not any(isinstance(c, ModelCheckpoint) for c in given):
        defaults.append(ModelCheckpoint(dirpath=storage.join(root_dir, "checkpoints")))
    return defaults


def logger_bridge(loggers: list[Logger]) -> LoggerBridge:
    """What carries a fit's runs, values, params and checkpoints to `loggers` (the Trainer starts and ends the runs)."""
    return LoggerBridge(loggers)


def default_logger() -> Logger:
    """Lightning's rule: a `TensorBoardLogger` where the tensorboard package is installed, else a `CSVLogger`; both
    in `default_root_dir/lightning_logs/version_N`. A program that draws on TensorBoard's writer
    (`self.logger.experiment.add_image(...)`) finds it where Lightning's would."""
    return TensorBoardLogger() if tensorboard_installed() else CSVLogger()


def tensorboard_installed() -> bool:
    """Whether the tensorboard package can be imported (looked up, not imported: the logger imports it at start)."""
    return importlib.util.find_spec("tensorboard") is not None


def loggers_from(
    loggers: Sequence[Logger] | bool | None, logger: Logger | Sequence[Logger] | bool | None = None
) -> list[Logger]:
    """`Trainer(loggers=...)` (or Lightning's `logger=`, one logger or several) as a list: None or True, the
    `default_logger()`; False, none; else the loggers, checked."""
    if logger is not None:  # Lightning's spelling, the same meaning (one logger or several, True, False)
        if loggers is not None:
            raise ValueError(
                f"Trainer got both logger={logger!r} and loggers={loggers!r}; pass one of them "
                "(loggers=[...] is tracktrain's name, logger= Lightning's)."
            )
        loggers = [logger] if isinstance(logger, Logger) else logger
    if loggers is None or loggers is True:
        return [default_logger()]
    if loggers is False:
        return []
    loggers = arguments.as_list("Trainer(loggers=...)", loggers, "tracktrain.loggers.Logger instances")
    for logger in loggers:
        if not isinstance(logger, Logger):
            raise TypeError(
                f"Trainer(loggers=...) takes tracktrain.loggers.Logger instances (MLflowLogger, WandbLogger, "
                f"CSVLogger, ...), got {logger!r}."
            )
    trackers = [logger.tracker for logger in loggers]
    if len(set(trackers)) != len(trackers):
        raise ValueError(f"Trainer(loggers=...) has two loggers of one kind {trackers}; their run ids would collide.")
    return loggers
