"""Ignite's `TensorboardLogger` over tracktrain's `TensorBoardLogger`, and the handlers Ignite's module offers."""

from __future__ import annotations

import os
import socket
from datetime import datetime
from typing import Any

from tracktrain.handlers.base_logger import (
    GradsHistHandler,
    GradsScalarHandler,
    OptimizerParamsHandler,
    OutputHandler,
    WeightsHistHandler,
    WeightsScalarHandler,
)
from tracktrain.handlers.global_step import global_step_from_engine
from tracktrain_integrations.ignite_loggers.face import TrackerFace
from tracktrain_integrations.tensorboard import TensorBoardLogger

__all__ = [
    "GradsHistHandler",
    "GradsScalarHandler",
    "OptimizerParamsHandler",
    "OutputHandler",
    "TensorboardLogger",
    "WeightsHistHandler",
    "WeightsScalarHandler",
    "global_step_from_engine",
]


# SummaryWriter's arguments, in its order
_WRITER_ARGUMENTS = ("log_dir", "comment", "purge_step", "max_queue", "flush_secs", "filename_suffix")


class TensorboardLogger(TrackerFace):
    """Ignite's TensorBoard logger: takes `SummaryWriter`'s arguments (`log_dir`, `comment`, `flush_secs`, ...);
    without `log_dir`, writes under `runs/<date>_<host><comment>` as SummaryWriter does. `writer` is the
    SummaryWriter, for what the handlers do not write (images, graphs)."""

    histograms = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(_WRITER_ARGUMENTS):
            raise TypeError(f"TensorboardLogger takes SummaryWriter's arguments {_WRITER_ARGUMENTS}, got {args!r}.")
        given_twice = sorted(set(_WRITER_ARGUMENTS[: len(args)]) & set(kwargs))
        if given_twice:
            raise TypeError(f"TensorboardLogger got {given_twice} by position and by keyword.")
        writer_kwargs = {**dict(zip(_WRITER_ARGUMENTS, args)), **kwargs}  # the rest checked by TensorBoardLogger
        log_dir = writer_kwargs.pop("log_dir", None)
        if log_dir is None:
            stamp = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", f"{stamp}_{socket.gethostname()}{writer_kwargs.get('comment', '')}")
        super().__init__(TensorBoardLogger(log_dir=log_dir, **writer_kwargs))

    @property
    def writer(self) -> Any:
        """The run's `torch.utils.tensorboard.SummaryWriter` (our logger's `experiment`)."""
        tracker = self.tracker
        assert isinstance(tracker, TensorBoardLogger)
        return tracker.experiment
