"""Checks of the Trainer's arguments: each error names the argument, the value given and what is accepted."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, overload

import torch
from torch import nn

from tracktrain.checks.numeric import is_integral, is_real
from tracktrain.distributed.ranks import rank_and_world_size
from tracktrain.engine.combined_loader import COMBINED_MODES, CombinedLoader
from tracktrain.engine.compiling import compile_options
from tracktrain.trainer.batches import several_loaders
from tracktrain.trainer.lightning_names import check_lightning_callback

__all__ = [
    "as_list",
    "autocast_dtype_of",
    "check_activation_checkpointing",
    "check_clip_algorithm",
    "check_compile",
    "check_devices",
    "check_limits",
    "check_location",
    "check_limit",
    "check_non_negative_number",
    "check_positive_int",
    "device_of",
    "param_dtype_of",
    "validation_schedule",
]

_PRECISIONS = {
    "32-true": None,
    "32": None,
    32: None,
    "bf16-mixed": torch.bfloat16,
    "16-mixed": torch.float16,
}
# Lightning's "true" precisions: the weights in that dtype (the floating inputs cast to it), no autocast
_TRUE_PRECISIONS = {
    "bf16-true": torch.bfloat16,
    "16-true": torch.float16,
    "64-true": torch.float64,
    "64": torch.float64,
    64: torch.float64,
}


@overload
def check_positive_int(name: str, value: Any) -> int: ...


@overload
def check_positive_int(name: str, value: Any, allow_none: bool) -> int | None: ...


def check_positive_int(name: str, value: Any, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if not is_integral(value) or isinstance(value, bool) or value < 1:
        accepted = "a positive integer" + (" or None" if allow_none else "")
        raise ValueError(f"Trainer({name}=...) must be {accepted}, got {value!r}.")
    return int(value)


def check_non_negative_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not is_integral(value) or value < 0:
        raise ValueError(f"Trainer({name}=...) must be an integer >= 0, got {value!r}.")
    return int(value)


def check_non_negative_number(name: str, value: Any, allow_infinite: bool = False) -> float | None:
    """A number >= 0 (NaN never: every comparison with it is false, so it would pass any check later), 0 as None."""
    if value is None:
        return None
    if (
        not is_real(value)
        or isinstance(value, bool)
        or math.isnan(value)
        or value < 0
        or (math.isinf(value) and not allow_infinite)
    ):
        bound = "a number >= 0" if allow_infinite else "a finite number >= 0"
        raise ValueError(f"Trainer({name}=...) must be {bound} or None, got {value!r}.")
    return float(value) or None


def check_limit(name: str, value: Any) -> int | float | None:
    """`limit_*_batches`: None (all), a number of batches (int >= 0), or a fraction of the loader (0.0 to 1.0)."""
    if value is None:
        return None
    if isinstance(value, bool) or not is_real(value):
        raise TypeError(
            f"Trainer({name}=...) must be an int (batches), a float in [0, 1] (fraction) or None, got {value!r}."
        )
    if is_integral(value):
        if value < 0:
            raise ValueError(f"Trainer({name}=...) must be >= 0 batches, got {value}.")
        return int(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"Trainer({name}=...) as a fraction of the loader must be in [0, 1], got {value}.")
    return float(value)


def check_limits(train: Any, val: Any, test: Any, predict: Any) -> dict[str, int | float | None]:
    """The `limit_*_batches` of each stage."""
    return {
        "fit": check_limit("limit_train_batches", train),
        "validate": check_limit("limit_val_batches", val),
        "test": check_limit("limit_test_batches", test),
        "predict": check_limit("limit_predict_batches", predict),
    }


def validation_schedule(
    every_n_epochs: Any, check_val_every_n_epoch: Any, interval: Any
) -> tuple[int, int | float | None]:
    """`val_every_n_epochs` (Lightning's `check_val_every_n_epoch`: one setting under two names; default 1) and
    `val_check_interval`: None (at the epoch's end), batches (int), or a fraction of the epoch's batches (a float in
    (0, 1]; 1.0 is the epoch's end, as Lightning's default)."""
    if every_n_epochs is not None and check_val_every_n_epoch is not None:
        raise ValueError(
            f"Trainer(val_every_n_epochs={every_n_epochs!r}, check_val_every_n_epoch={check_val_every_n_epoch!r}): "
            "these are one setting under two names (ours and Lightning's); give one of them."
        )
    if check_val_every_n_epoch is not None:
        every = check_positive_int("check_val_every_n_epoch", check_val_every_n_epoch)
    else:
        every = check_positive_int("val_every_n_epochs", 1 if every_n_epochs is None else every_n_epochs)
    if interval is None or is_integral(interval) and not isinstance(interval, bool):
        return every, check_positive_int("val_check_interval", interval, allow_none=True)
    if not is_real(interval) or isinstance(interval, bool) or not 0.0 < interval <= 1.0:
        raise ValueError(
            "Trainer(val_check_interval=...) must be a number of training batches (a positive int), a fraction of "
            f"the epoch's batches (a float in (0, 1]: 0.5 validates twice per epoch) or None, got {interval!r}."
        )
    return every, (None if interval == 1.0 else float(interval))


def check_devices(devices: Any) -> None:
    """Lightning's `devices=`: here the launcher starts the processes (one device each), so "auto" or the number of
    processes torchrun started on this machine (1 without torchrun) is accepted, as a check; anything else refused."""
    started = rank_and_world_size()[1]
    try:
        started = int(os.environ.get("LOCAL_WORLD_SIZE") or started)
    except ValueError:
        pass  # not torchrun's: the world size
    if devices == "auto" or (is_integral(devices) and not isinstance(devices, bool) and devices == started):
        return
    raise ValueError(
        f"Trainer(devices={devices!r}) but {started} process(es) run on this machine: tracktrain trains on the "
        "processes its launcher starts, one device each. Start them with `torchrun --nproc_per_node N script.py` (or "
        f'tracktrain.distributed.spawn(fn, N)) and pass devices="auto" (or the same N).'
    )


def root_dir_of(value: Any) -> str:
    """`default_root_dir`: a path or URL; None: the working directory."""
    return os.getcwd() if value is None else check_location("Trainer(default_root_dir=...)", value)


def check_clip_algorithm(value: Any) -> str:
    return check_choice("gradient_clip_algorithm", value, ("norm", "value"))


def check_compile(value: Any) -> dict[str, Any] | None:
    """`compile=`: torch.compile's options (None: no compiling), checked by torch.compile now."""
    return compile_options("Trainer(compile=...)", value)


def check_activation_checkpointing(value: Any) -> Callable[[nn.Module], bool] | tuple[type[nn.Module], ...] | None:
    """`Trainer(activation_checkpointing=...)`: a module class, a list of them, or a function of a submodule; None
    or an empty list: none."""
    if value is None or (callable(value) and not isinstance(value, (type, nn.Module))):
        return value
    classes = (value,) if isinstance(value, type) else value
    if isinstance(classes, (str, bytes, Mapping)) or not isinstance(classes, Iterable):
        classes = (classes,)
    classes = tuple(classes)
    wrong = [cls for cls in classes if not (isinstance(cls, type) and issubclass(cls, nn.Module))]
    if wrong:
        raise TypeError(
            "Trainer(activation_checkpointing=...) takes nn.Module classes (your block's: [TransformerBlock], the "
            f"class itself, not its name) or a function of a submodule returning True for those to checkpoint, got "
            f"{value!r}."
        )
    return classes or None


def check_location(
    owner: str, value: Any, what: str = 'a directory path or an fsspec URL (e.g. "runs" or "s3://bucket/runs")'
) -> str:
    """A place as a path or fsspec URL: a non-empty str or os.PathLike (bytes paths are not URLs)."""
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(text, str) or not text.strip():
        raise TypeError(f"{owner} must be {what}: a non-empty str or os.PathLike, got {value!r}.")
    return text


def as_list(owner: str, value: Any, what: str) -> list[Any]:
    """`value` (a list, tuple or other iterable, or None) as a list; a single object or a non-iterable refused."""
    if value is None:
        return []
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(f"{owner} takes a list of {what}, got {value!r}; wrap a single one in a list: [...].")
    return list(value)


def autocast_dtype_of(precision: Any) -> torch.dtype | None:
    """`Trainer(precision=...)`'s autocast dtype (mixed precision), None for a "true" precision."""
    known = {**_PRECISIONS, **_TRUE_PRECISIONS}
    if not isinstance(precision, Hashable) or precision not in known:
        raise ValueError(
            f"Trainer(precision=...) must be one of {[p for p in known if isinstance(p, str)]}, got {precision!r}."
        )
    return _PRECISIONS.get(precision)


def param_dtype_of(precision: Any) -> torch.dtype | None:
    """The dtype of the weights under a "true" precision (Lightning's "bf16-true", "16-true", "64-true"), else
    None (the module's own, float32)."""
    return _TRUE_PRECISIONS.get(precision) if isinstance(precision, Hashable) else None


def device_of(accelerator: Any) -> torch.device:
    if accelerator == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if accelerator == "cpu":
        return torch.device("cpu")
    if accelerator in ("cuda", "gpu"):
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"Trainer(accelerator={accelerator!r}) but CUDA is not available here; use accelerator='cpu' or 'auto'."
            )
        return torch.device("cuda", torch.cuda.current_device())
    raise ValueError(f"Trainer(accelerator=...) must be 'auto', 'cpu' or 'cuda', got {accelerator!r}.")


def check_loader(name: str, loader: Any, required: bool = False, training: bool = False) -> None:
    """A stage's loader: an iterable of batches, or Lightning's several loaders (a list, tuple or dict of DataLoaders,
    or a `CombinedLoader`): read one after the other by evaluation stages, together by training
    (`batches.combined_for_training`), whose loop cannot read them one after the other (Lightning's rule)."""
    if loader is None:
        if required:
            raise ValueError(f"{name} is required: pass a DataLoader or another iterable of batches.")
        return
    if isinstance(loader, CombinedLoader):
        if training and loader.mode == "sequential":
            raise ValueError(
                f'{name} got a CombinedLoader(mode="sequential"): training reads its loaders together, one batch of '
                f"each per step. Use one of the modes {[m for m in COMBINED_MODES if m != 'sequential']}, or join "
                "the datasets in one loader (torch.utils.data.ConcatDataset) to read one after the other."
            )
        return
    if several_loaders(loader) is not None:
        return
    if not isinstance(loader, Iterable) or isinstance(loader, (str, bytes, Mapping)):
        raise TypeError(
            f"{name} must be a DataLoader or another iterable of batches, got {type(loader).__name__}: {loader!r:.80}."
        )


def require_override(module: Any, method: str, purpose: str) -> None:
    from tracktrain.trainer.module import LoopModule  # the base whose methods raise "not implemented"

    if getattr(type(module), method) is getattr(LoopModule, method):
        raise NotImplementedError(
            f"To {purpose}, {type(module).__name__} must define {method}(self, batch, batch_idx)."
        )


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} is True or False, got {value!r}.")
    return value


def check_callbacks(callbacks: Any, callback_type: type) -> list[Any]:
    if isinstance(callbacks, callback_type):  # Lightning's Trainer(callbacks=one_callback)
        callbacks = [callbacks]
    callbacks = as_list("Trainer(callbacks=...)", callbacks, "tracktrain.callbacks.Callback instances")
    for callback in callbacks:
        if not isinstance(callback, callback_type):
            raise TypeError(
                f"Trainer(callbacks=...) takes tracktrain.callbacks.Callback instances, got {callback!r}. "
                "Attach plain Engine handlers to trainer.train_engine instead."
            )
        check_lightning_callback(callback, callback_type)
    return callbacks


def check_deterministic(value: Any) -> bool | str | None:
    if value is not None and not isinstance(value, bool) and value != "warn":
        raise ValueError(f'Trainer(deterministic=...) is True, "warn", False or None, got {value!r}.')
    return value


def set_torch_flags(deterministic: bool | str | None, benchmark: bool | None) -> None:
    """Lightning's rule for torch's global flags: `benchmark` sets cuDNN's autotuner (None: leave it, but off under
    `deterministic`); `deterministic` True makes a nondeterministic kernel an error, "warn" a warning, False lets
    them run, None leaves torch's setting as it is."""
    if benchmark is not None and not isinstance(benchmark, bool):
        raise TypeError(f"Trainer(benchmark=...) is True, False or None, got {benchmark!r}.")
    if deterministic:
        if benchmark:
            warnings.warn(
                "Trainer(deterministic=True, benchmark=True): torch ignores cudnn.deterministic while cuDNN's "
                "autotuner picks kernels, so cuDNN's choices may differ from run to run.",
                stacklevel=3,
            )
        elif benchmark is None:
            benchmark = False
    if benchmark is not None:
        torch.backends.cudnn.benchmark = benchmark
    if deterministic is not None:
        torch.use_deterministic_algorithms(bool(deterministic), warn_only=deterministic == "warn")
    if deterministic:  # cuBLAS is deterministic only with a fixed workspace (read when CUDA starts)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def check_seed(seed: Any) -> int | None:
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise TypeError(f"Trainer(seed=...) must be an int or None, got {seed!r}.")
    return seed


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, Hashable) or value not in choices:
        raise ValueError(
            f"Trainer({name}=...) must be {' or '.join(repr(c).replace(chr(39), chr(34)) for c in choices)}, "
            f"got {value!r}."
        )
    return value
