"""`scale_batch_size`: the largest batch size whose training steps fit in memory.

Each trial is a short fit (`steps_per_trial` optimizer steps) of a temporary Trainer built from the user's, on the
loader rebuilt with the trial's batch size. "Fits" means:

- on CUDA, no `torch.OutOfMemoryError` (the cache is emptied after one);
- on CPU, which never runs out before the machine does, the trial's peak memory stays within `max_memory` bytes:
  the growth of the process's peak resident set (Linux's `VmHWM`, reset before each trial through
  `/proc/self/clear_refs`) over its resident set when the trial started. That counts every page the trial touched
  for the first time (tensors, the loader's batches, the autograd graph), whatever allocated it; it does not count
  memory the process already held and reused (freed blocks the C allocator kept from before), so it can only
  under-estimate a trial that reuses memory — trials run from small batches to large, so each larger one mostly
  needs new pages. A `torch.OutOfMemoryError` raised on CPU counts as "does not fit" too.

"power" doubles the batch size until a trial fails; "binsearch" then bisects between the last that fitted and the
first that failed. The module's weights, its optimizer's state and the random generators come back as they were.
"""

from __future__ import annotations

import ctypes
import gc
import re
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader

from tracktrain.checks.numeric import is_integral
from tracktrain.trainer.module import LoopModule
from tracktrain.trainer.strategies.data_parallel import with_sampler
from tracktrain.trainer.trainer import Trainer
from tracktrain.tuning.probe import OptimizerSnapshot, check_trainer_and_module, probe_trainer, restored

__all__ = ["peak_memory_growth", "scale_batch_size"]

MODES = ("power", "binsearch")


def scale_batch_size(
    trainer: Trainer,
    module: LoopModule,
    train_dataloaders: Any,
    mode: str = "power",
    init_val: int = 2,
    max_trials: int = 25,
    steps_per_trial: int = 3,
    max_memory: int | None = None,
    update_attr: bool = False,
) -> int:
    """The largest batch size (from `init_val`, at most `max_trials` trials) whose `steps_per_trial` training steps
    fit: no out-of-memory error, and on CPU a peak memory growth within `max_memory` bytes (see this module's
    docstring for what is measured).

    `train_dataloaders`: a `DataLoader` with a `batch_size` (rebuilt for each trial with its dataset, sampler kind,
    collate_fn, workers and the rest of its settings), or a datamodule-like object with a `batch_size` attribute and
    a `train_dataloader()` method (its attribute set for each trial, then put back). `update_attr`: set the result
    as `module.batch_size` (and on the datamodule, when one was given).
    """
    check_trainer_and_module("scale_batch_size", trainer, module)
    if mode not in MODES:
        raise ValueError(f"scale_batch_size(mode=...) must be 'power' or 'binsearch', got {mode!r}.")
    init_val = _positive_int("init_val", init_val)
    max_trials = _positive_int("max_trials", max_trials)
    steps_per_trial = _positive_int("steps_per_trial", steps_per_trial)
    on_cuda = trainer.device.type == "cuda"
    if max_memory is None and not on_cuda:
        raise ValueError(
            "scale_batch_size on CPU needs a memory budget: max_memory=<bytes> (e.g. 8 * 2**30), since a CPU trial "
            "only fails when the whole machine runs out; on CUDA, out-of-memory errors decide without one."
        )
    if max_memory is not None and (not is_integral(max_memory) or isinstance(max_memory, bool) or max_memory < 1):
        raise ValueError(f"scale_batch_size(max_memory=...) must be a number of bytes > 0 or None, got {max_memory!r}.")
    if max_memory is not None and not on_cuda:
        peak_memory_growth(lambda: None)  # refuse early where the peak cannot be measured
    loader_for = _loader_factory(train_dataloaders)
    snapshot = OptimizerSnapshot()

    def fits(batch_size: int) -> bool:
        batches = steps_per_trial * trainer.accumulate_grad_batches
        probe = probe_trainer(trainer, [snapshot], max_steps=steps_per_trial, limit_train_batches=batches)
        return _trial(lambda: probe.fit(module, loader_for(batch_size)), on_cuda, max_memory)

    with restored(module, snapshot):
        best = _search(fits, init_val, max_trials, mode, _dataset_size(train_dataloaders))
    if best is None:
        raise RuntimeError(
            f"scale_batch_size: even batch size {init_val} does not fit"
            + (f" in max_memory={max_memory} bytes" if max_memory is not None and not on_cuda else " in memory")
            + ". Lower init_val, raise max_memory, or shrink the model (activation_checkpointing, precision)."
        )
    if update_attr:
        setattr(module, "batch_size", best)  # noqa: B010  (nn.Module.__setattr__ is typed for tensors and modules)
        if not isinstance(train_dataloaders, DataLoader):
            train_dataloaders.batch_size = best
    return best


def _search(fits: Callable[[int], bool], init_val: int, max_trials: int, mode: str, cap: int | None) -> int | None:
    """Double from `init_val` while trials fit; in "binsearch", bisect between the last fit and the first failure.
    `cap`: the dataset's size, where known: a larger batch would only be a smaller one (the whole dataset), which
    would fit and say nothing about the larger size."""
    good: int | None = None
    bad: int | None = None
    size, trials = init_val if cap is None else min(init_val, cap), 0
    while trials < max_trials:
        trials += 1
        if fits(size):
            good = size
            if bad is None:
                if size == cap:
                    break
                size = size * 2 if cap is None else min(size * 2, cap)
                continue
        else:
            bad = size
        if mode == "power" or good is None:
            break
        if bad is None or bad - good <= 1:
            break
        size = (good + bad) // 2
    return good


def _trial(run: Callable[[], None], on_cuda: bool, max_memory: int | None) -> bool:
    """Whether `run()` fits. After an out-of-memory error its frames (and the tensors they hold) are collected and, on
    CUDA, the cached blocks given back — outside the `except`, where the traceback no longer keeps them alive."""
    try:
        if on_cuda or max_memory is None:
            run()
            return True
        return peak_memory_growth(run) <= max_memory
    except torch.OutOfMemoryError:
        pass
    gc.collect()  # a third of a second on a loaded CPU: only after a failure
    if on_cuda:
        torch.cuda.empty_cache()
    return False


def peak_memory_growth(run: Callable[[], None]) -> int:
    """Bytes by which this process's peak resident set rose above its resident set while `run()` ran (Linux: the
    peak is reset first through /proc/self/clear_refs, after the allocator's free pages are given back). Raises where
    that cannot be measured."""
    # the C allocator's free pages given back (glibc), so that this trial's allocations show in the resident set
    # instead of reusing pages already counted
    _give_back_free_memory()
    try:
        with open("/proc/self/clear_refs", "w") as file:
            file.write("5")  # 5: reset the peak resident set (VmHWM) to the current one
        start = _status_bytes("VmRSS")
    except OSError as error:
        raise RuntimeError(
            "scale_batch_size(max_memory=...) measures a CPU trial's peak memory through Linux's /proc/self/status "
            f"and /proc/self/clear_refs, which are not available here ({error}). Run it on Linux or on CUDA."
        ) from error
    run()
    return max(_status_bytes("VmHWM") - start, 0)


def _give_back_free_memory() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: its free pages stay, and a trial may reuse them unseen
        pass


def _positive_int(name: str, value: Any) -> int:
    if not is_integral(value) or isinstance(value, bool) or value < 1:
        raise ValueError(f"scale_batch_size({name}=...) must be a positive integer, got {value!r}.")
    return int(value)


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as file:
        match = re.search(rf"^{field}:\s+(\d+) kB", file.read(), re.MULTILINE)
    if match is None:
        raise OSError(f"/proc/self/status has no {field}")
    return int(match.group(1)) * 1024


def _dataset_size(loader: Any) -> int | None:
    dataset = getattr(loader, "dataset", None) if isinstance(loader, DataLoader) else None
    try:
        return len(dataset) if dataset is not None else None
    except TypeError:  # an IterableDataset without a length
        return None


def _loader_factory(loader: Any) -> Callable[[int], Any]:
    """A function from a batch size to a loader of that batch size, or an error saying why there is none."""
    if isinstance(loader, DataLoader):
        if loader.batch_size is None or type(loader.batch_sampler) is not BatchSampler:
            raise ValueError(
                "scale_batch_size rebuilds the DataLoader with each batch size, but this one has "
                f"batch_sampler={type(loader.batch_sampler).__name__} and batch_size={loader.batch_size!r}: its "
                "batches are not made by batch_size. Give a DataLoader(dataset, batch_size=..., ...) or a "
                "datamodule-like object with batch_size and train_dataloader()."
            )
        return lambda batch_size: _rebuilt(loader, batch_size)
    if hasattr(loader, "batch_size") and callable(getattr(loader, "train_dataloader", None)):
        original = loader.batch_size

        def from_datamodule(batch_size: int) -> Any:
            loader.batch_size = batch_size
            try:
                return loader.train_dataloader()
            finally:
                loader.batch_size = original

        return from_datamodule
    raise TypeError(
        f"scale_batch_size cannot rebuild a {type(loader).__name__} with another batch size. Give a "
        "torch.utils.data.DataLoader made with batch_size=..., or an object with a batch_size attribute and a "
        "train_dataloader() method that reads it."
    )


def _rebuilt(loader: DataLoader, batch_size: int) -> DataLoader:
    """`loader` with `batch_size`: the same dataset, sampler (shuffling or not), collate_fn, workers and the rest."""
    return with_sampler(loader, loader.sampler, batch_size=batch_size)  # type: ignore[arg-type]
