"""Lightning's `Tuner(trainer)`: `lr_find` and `scale_batch_size` with Lightning's arguments and defaults, over
`tracktrain.tuning`'s two searches (one implementation each). The loaders are the ones given, else the datamodule's,
else the module's own `train_dataloader()`, as a fit would take them."""

from __future__ import annotations

import os
from typing import Any

from tracktrain.trainer.module import LoopModule
from tracktrain.trainer.trainer import Trainer
from tracktrain.tuning.batch_size_finder import scale_batch_size
from tracktrain.tuning.lr_finder import LRFinderResult, lr_find

__all__ = ["Tuner"]

#: on CPU, what a batch-size trial may grow the process by when no budget is given: a quarter of the memory the
#: machine has free (Lightning has none, and a CPU only fails once the machine runs out)
CPU_BUDGET_SHARE = 0.25


class Tuner:
    """`Tuner(trainer).lr_find(model)` and `Tuner(trainer).scale_batch_size(model)`, as Lightning's."""

    def __init__(self, trainer: Trainer) -> None:
        if not isinstance(trainer, Trainer):
            raise TypeError(f"Tuner(trainer) takes a tracktrain Trainer, got {trainer!r}.")
        self._trainer = trainer

    def lr_find(
        self,
        model: LoopModule,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: Any = None,
        method: str = "fit",
        min_lr: float = 1e-8,
        max_lr: float = 1.0,
        num_training: int = 100,
        mode: str = "exponential",
        early_stop_threshold: float | None = 4.0,
        update_attr: bool = True,
        attr_name: str = "",
    ) -> LRFinderResult:
        """Lightning's range test: the sweep's result (`.results`, `.suggestion()`, `.plot()`); with `update_attr`
        (Lightning's default) the suggestion is set on the module (`attr_name`, else `lr` or `learning_rate`, in its
        `hparams` too when it has it there)."""
        if method != "fit":
            raise ValueError(f'Tuner.lr_find(method=...) is "fit" (the sweep trains), got {method!r}.')
        # val_dataloaders, dataloaders: a sweep trains only; Lightning does not read them during it either
        loader = _train_loader(model, train_dataloaders, datamodule, "lr_find")
        result = lr_find(
            self._trainer,
            model,
            loader,
            min_lr=min_lr,
            max_lr=max_lr,
            num_training=num_training,
            mode=mode,
            early_stop_threshold=early_stop_threshold,
        )
        if update_attr:
            _set_attribute(model, attr_name, ("lr", "learning_rate"), result.suggestion(), "lr_find")
        return result

    def scale_batch_size(
        self,
        model: LoopModule,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: Any = None,
        method: str = "fit",
        mode: str = "power",
        steps_per_trial: int = 3,
        init_val: int = 2,
        max_trials: int = 25,
        batch_arg_name: str = "batch_size",
    ) -> int:
        """Lightning's batch-size search: the largest batch whose training steps fit (on CPU, within a quarter of
        the machine's free memory); it is set as the module's (and the datamodule's) `batch_arg_name`, as Lightning
        sets it."""
        if method != "fit":
            raise ValueError(f'Tuner.scale_batch_size(method=...) is "fit" (the trials train), got {method!r}.')
        if batch_arg_name != "batch_size":
            raise ValueError(
                f"Tuner.scale_batch_size(batch_arg_name={batch_arg_name!r}): the search rebuilds the loader with "
                "its batch_size (or a datamodule's batch_size attribute); name the attribute batch_size."
            )
        source = datamodule if datamodule is not None else train_dataloaders
        if source is None:
            source = _train_loader(model, None, None, "scale_batch_size")
        on_cuda = self._trainer.device.type == "cuda"
        return scale_batch_size(
            self._trainer,
            model,
            source,
            mode=mode,
            init_val=init_val,
            max_trials=max_trials + 1,  # Lightning's counts the increases after the first trial
            steps_per_trial=steps_per_trial,
            max_memory=None if on_cuda else _cpu_budget(),
            update_attr=True,
        )


def _train_loader(model: LoopModule, given: Any, datamodule: Any, caller: str) -> Any:
    if given is not None:
        return given
    sources: tuple[Any, ...] = (datamodule, model)
    for source in sources:
        method = getattr(source, "train_dataloader", None)
        if callable(method):
            setup = getattr(source, "setup", None)
            if callable(setup):
                setup("fit")
            return method()
    raise ValueError(
        f"Tuner.{caller} needs training data: pass train_dataloaders=..., a datamodule=..., or define "
        f"{type(model).__name__}.train_dataloader()."
    )


def _set_attribute(model: LoopModule, name: str, candidates: tuple[str, ...], value: float, caller: str) -> None:
    hparams = getattr(model, "hparams", {})
    names = (name,) if name else candidates
    for candidate in names:
        if candidate in hparams:
            hparams[candidate] = value
            if hasattr(model, candidate):
                setattr(model, candidate, value)
            return
        if hasattr(model, candidate):
            setattr(model, candidate, value)
            return
    raise AttributeError(
        f"Tuner.{caller}(update_attr=True) found none of {list(names)} on {type(model).__name__} or its hparams, to "
        f"set the suggestion {value:g} on: give the module one (self.lr = ...), pass attr_name=..., or "
        "update_attr=False."
    )


def _cpu_budget() -> int:
    free = None
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    free = int(line.split()[1]) * 1024
    except OSError:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else None
    return int((free or 8 * 2**30) * CPU_BUDGET_SHARE)
