"""`TensorBoardLogger`: every value the Trainer publishes as a TensorBoard scalar, in Lightning's layout.

It writes through `torch.utils.tensorboard` (torch's own writer), which needs the `tensorboard` package:
`pip install 'tracktrain[tensorboard]'`. With that package installed it is the Trainer's default logger, as in
Lightning (`tracktrain/trainer/defaults.py`).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from typing import Any

from tracktrain.loggers.base import Logger, flatten_params
from tracktrain.loggers.versioned import VersionedFolders, write_status, write_yaml

__all__ = ["TensorBoardLogger", "summary_writer"]


def summary_writer() -> Any:
    """torch's `SummaryWriter` class, or an ImportError naming the install when tensorboard is missing."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as error:  # torch's module imports the tensorboard package
        raise ImportError(
            "TensorBoard logging needs the tensorboard package: pip install 'tracktrain[tensorboard]'"
        ) from error
    return SummaryWriter


class TensorBoardLogger(VersionedFolders, Logger):  # type: ignore[override]  # as CSVLogger: save_dir a property
    """Lightning's `TensorBoardLogger`, with its arguments and layout: each value the Trainer publishes is a scalar
    at its global step, in `{save_dir}/{name}/version_{N}` (`log_dir`), with the hyperparameters as text and in
    `hparams.yaml`. `experiment` is the `SummaryWriter`, for what a program writes itself
    (`self.logger.experiment.add_image(...)`). Event files are local and buffered by TensorBoard's own writer thread,
    so it needs no delivery queue.

    Args:
        save_dir: the directory of the logs; default: the Trainer's `default_root_dir` (`./.tracktrain` when that is
            a remote URL).
        name: the experiment's folder under `save_dir` ("lightning_logs"; "" or None: none).
        version: the run's folder: `version_{N}` for an int, the string itself for a str; default: the next free one.
        log_graph: add the module's graph at the fit's start, traced on its `example_input_array`.
        default_hp_metric: log `hp_metric` = -1 with the hyperparameters (Lightning's placeholder for TensorBoard's
            HParams tab).
        prefix: put before every metric's name, with "-".
        sub_dir: a folder under the version's, for the event files.
        log_dir: the events' folder itself, instead of `save_dir/name/version` (tracktrain's spelling).
        **kwargs: passed to `SummaryWriter` (`max_queue`, `flush_secs`, ...).
    """

    tracker = "tensorboard"
    LOGGER_JOIN_CHAR = "-"

    def __init__(
        self,
        save_dir: str | os.PathLike | None = None,
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        log_graph: bool = False,
        default_hp_metric: bool = True,
        prefix: str = "",
        sub_dir: str | os.PathLike | None = None,
        log_dir: str | os.PathLike | None = None,
        **kwargs: Any,
    ) -> None:
        writer = summary_writer()  # fail now, not when fit starts, when tensorboard is missing
        unknown = set(kwargs) - set(inspect.signature(writer).parameters)
        if unknown:
            raise TypeError(f"TensorBoardLogger got arguments SummaryWriter does not take: {sorted(unknown)}.")
        self._set_folders(save_dir, name, version)
        self._sub_dir = os.fspath(sub_dir) if sub_dir is not None else None
        self._log_dir = os.fspath(log_dir) if log_dir is not None else None
        self.log_graph_at_start = log_graph
        self.default_hp_metric = default_hp_metric
        self.prefix = prefix
        self._writer_kwargs = kwargs
        self._writer: Any = None

    # ------------------------------------------------------------------------------------- Lightning's surface
    @property
    def log_dir(self) -> str | None:  # type: ignore[override]
        """The events' folder: `{save_dir}/{name}/version_{N}[/{sub_dir}]` (None until a fit starts the logger)."""
        return self._log_dir

    @property
    def experiment(self) -> Any:
        """The `SummaryWriter` of the run (after a fit started the logger)."""
        if self._writer is None:
            raise RuntimeError("TensorBoardLogger is not started: the Trainer starts it when fit begins.")
        return self._writer

    # ------------------------------------------------------------------------------------------ the protocol
    @property
    def run_id(self) -> str | None:
        return self._log_dir

    def resume(self, run_id: str) -> None:
        self._log_dir = run_id  # a resumed fit writes on into the run's folder

    def start(self, root_dir: str) -> None:
        if self._writer is not None:
            return
        if self._log_dir is None:
            version = self._version_folder(root_dir)  # chooses save_dir too, when none was given
            assert self.root_dir is not None
            folder = os.path.join(self.root_dir, version)
            self._log_dir = os.path.join(folder, self._sub_dir) if self._sub_dir else folder
        self._writer = summary_writer()(log_dir=self._log_dir, **self._writer_kwargs)

    def log_hyperparams(self, params: Any, metrics: Mapping[str, float] | None = None) -> None:
        """The hyperparameters as text (and `hparams.yaml` in `log_dir`); `metrics`, or with `default_hp_metric`
        `hp_metric` = -1, as scalars at step 0 (Lightning's)."""
        if not isinstance(params, Mapping):
            params = vars(params)
        flat = flatten_params(params)
        text = "\n".join(f"{name}: {value}" for name, value in flat.items())
        self.experiment.add_text("hyperparameters", text)
        write_yaml(os.path.join(self.experiment.log_dir, "hparams.yaml"), flat)
        values = dict(metrics) if metrics else ({"hp_metric": -1.0} if self.default_hp_metric else {})
        if values:
            self.log_metrics(values, 0)

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        for name, value in metrics.items():
            tag = f"{self.prefix}{self.LOGGER_JOIN_CHAR}{name}" if self.prefix else name
            self.experiment.add_scalar(tag, value, global_step=step)

    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """The module's graph, traced on `input_array` (default: its `example_input_array`); nothing without one."""
        example = input_array if input_array is not None else getattr(model, "example_input_array", None)
        if example is None:
            return
        import torch

        with torch.no_grad():
            self.experiment.add_graph(model, example)

    def watch_module(self, module: Any) -> None:
        if self.log_graph_at_start:  # at the fit's start, as Lightning's log_graph=True
            self.log_graph(module)

    def flush(self, timeout: float | None = None) -> bool:
        if self._writer is not None:
            self._writer.flush()
        return True

    def save(self) -> None:
        self.flush()

    def finalize(self, status: str = "FINISHED") -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            write_status(self._log_dir, status)  # type: ignore[arg-type]  # set by start
