"""Ignite's `WandBLogger` over tracktrain's `WandbLogger`, and the handlers Ignite's module offers (with its
deprecated `sync` argument)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from torch.optim import Optimizer

from tracktrain.handlers import base_logger
from tracktrain.handlers.global_step import global_step_from_engine
from tracktrain_integrations.ignite_loggers.face import TrackerFace
from tracktrain_integrations.wandb import WandbLogger

__all__ = ["OptimizerParamsHandler", "OutputHandler", "WandBLogger", "global_step_from_engine"]

_SYNC = "The sync argument for the WandBLoggers is no longer used, and may be removed in the future"
# wandb.init's arguments that tracktrain's WandbLogger names otherwise
_RENAMED = {"dir": "save_dir"}


class WandBLogger(TrackerFace):
    """Ignite's W&B logger: `wandb.init`'s keyword arguments (project, name, config, tags, dir, mode, entity, id,
    resume, group, notes, ...) open the run. Strings are logged too, as Ignite's. W&B's step only grows: values at
    an older step are dropped, counted and warned of, as W&B drops them.

    Ignite's logger hands any other attribute to the `wandb` module; this one offers `log`, `watch`, `config`,
    `save` and `run` (the `wandb.Run`) by name."""

    steps_only_grow = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args:
            raise TypeError(
                f"WandBLogger takes wandb.init's arguments by keyword (project=..., name=..., config=...), got "
                f"positional {args!r}."
            )
        if not kwargs.pop("init", True):
            raise ValueError(
                "WandBLogger(init=False) would log into a run started elsewhere; tracktrain's opens its own run "
                "and delivers to it from the background: drop init=False and pass wandb.init's arguments here."
            )
        if "reinit" in kwargs:
            raise ValueError(
                f"WandBLogger(reinit={kwargs['reinit']!r}): each WandBLogger opens a run of its own beside any other "
                "(W&B's reinit='create_new'); drop reinit."
            )
        options = {_RENAMED.get(key, key): value for key, value in kwargs.items()}
        tracker = WandbLogger(**options)
        self._wandb = tracker
        self._latest_step = 0
        super().__init__(tracker)

    def _create_output_handler(self, *args: Any, **kwargs: Any) -> base_logger.BaseHandler:
        return OutputHandler(*args, **kwargs)

    def _create_opt_params_handler(self, *args: Any, **kwargs: Any) -> base_logger.BaseHandler:
        return OptimizerParamsHandler(*args, **kwargs)

    @property
    def run(self) -> Any:
        """The `wandb.Run`."""
        return self._wandb.experiment

    @property
    def config(self) -> Any:
        return self.run.config

    def write_scalars(self, values: Mapping[str, Any], step: int) -> None:
        self._latest_step = max(self._latest_step, step)
        super().write_scalars(values, step)
        text = {name: value for name, value in values.items() if isinstance(value, str)}
        if text:
            self.tracker.log_metrics(text, step)  # type: ignore[arg-type] # W&B's rows take text

    def log(self, data: Mapping[str, Any], step: int | None = None, commit: bool | None = None) -> None:
        """`wandb.log`: `data` at `step` (default: the latest step logged)."""
        self.write_scalars(data, self._latest_step if step is None else step)

    def watch(
        self, model: Any, criterion: Any = None, log: str = "gradients", log_freq: int = 1000, **kwargs: Any
    ) -> Any:
        """`wandb.watch(model, ...)` on this logger's run."""
        return self.run.watch(model, criterion=criterion, log=log, log_freq=log_freq, **kwargs)

    def save(self, *args: Any, **kwargs: Any) -> Any:
        """`wandb.save`: a file kept with the run."""
        return self.run.save(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"WandBLogger has no {name!r}: Ignite's hands it to the wandb module, tracktrain's delivers the run's "
            "values from the background and offers log, watch, config, save and run (the wandb.Run) for the rest."
        )


class OutputHandler(base_logger.OutputHandler):
    """Ignite's W&B output handler: as `tracktrain.handlers.base_logger.OutputHandler`, strings logged too."""

    log_text = True

    def __init__(
        self,
        tag: str,
        metric_names: str | list[str] | None = None,
        output_transform: Any = None,
        global_step_transform: Any = None,
        sync: bool | None = None,
        state_attributes: list[str] | None = None,
    ) -> None:
        super().__init__(tag, metric_names, output_transform, global_step_transform, state_attributes)
        if sync is not None:
            warnings.warn(_SYNC, stacklevel=2)


class OptimizerParamsHandler(base_logger.OptimizerParamsHandler):
    """Ignite's W&B optimizer-parameters handler (see `tracktrain.handlers.base_logger`)."""

    def __init__(
        self, optimizer: Optimizer, param_name: str = "lr", tag: str | None = None, sync: bool | None = None
    ) -> None:
        super().__init__(optimizer, param_name, tag)
        if sync is not None:
            warnings.warn(_SYNC, stacklevel=2)
