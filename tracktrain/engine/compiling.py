"""`compile=` (on `ModelEngine` and the Trainer): `torch.compile` applied to a module in place, once.

`torch.compile(module)` returns a wrapper whose parameters are named `_orig_mod.<name>`, so its checkpoints do not
load into the eager module (nor the other way round). `nn.Module.compile(**options)` compiles the module's own
call instead: the module, its class and its parameter names stay what they were, and a checkpoint of a compiled
run loads into an eager one and back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

__all__ = ["compile_module", "compile_options"]


def compile_options(owner: str, value: Any) -> dict[str, Any] | None:
    """`compile=` as `torch.compile`'s keyword arguments: None for False (or None), {} for True, a dict as given —
    checked now by `torch.compile` itself (an unknown option, backend or mode fails here, not at the first step).
    `owner` names the argument in the errors, e.g. "Trainer(compile=...)"."""
    if value is None or value is False:
        return None
    if value is True:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise TypeError(
            f"{owner} takes True, False or a dict of torch.compile options (e.g. {{'backend': 'aot_eager'}} or "
            f"{{'mode': 'max-autotune'}}), got {value!r}."
        )
    options = dict(value)
    try:
        torch.compile(_nothing, **options)  # builds the compiler's wrapper only: nothing is traced or compiled yet
    except Exception as error:  # torch's own check of each option: TypeError, RuntimeError, InvalidBackend, ...
        raise ValueError(
            f"{owner} got options that torch.compile refuses: {options!r} ({type(error).__name__}: {error}). Give "
            "torch.compile's keyword arguments (backend, mode, fullgraph, dynamic, options, ...)."
        ) from error
    return options


def compile_module(module: nn.Module, options: Mapping[str, Any]) -> None:
    """Compile `module`'s call in place with `torch.compile(**options)` (`nn.Module.compile`): `module(...)` runs
    the compiled code from its first call on, and its `state_dict` keys stay the same (no `_orig_mod.` prefix).
    Graphs are traced and compiled at the first call of each kind (training, evaluation), not per step; compiling
    the same module again (a second fit) finds them in torch.compile's cache and traces nothing again."""
    if "forward" not in vars(module) and type(module).forward.__module__.startswith("torch."):
        # torch.compile runs the frames of torch's own files as they are and compiles the first frame of other
        # code it meets: a module whose forward is torch's (nn.Sequential, nn.Linear, nn.TransformerEncoderLayer)
        # has none, so `module.compile()` alone would compile nothing, silently. (`torch.compile(module)` adds a
        # frame of its own for such a module, under the wrapper that renames its parameters.) The forward is
        # called from this module's frame instead: the same call, which torch.compile traces.
        module.forward = _Forward(module.forward)
    module.compile(**options)


class _Forward:
    """A module's own forward, called from a frame that torch.compile traces (see `compile_module`)."""

    def __init__(self, forward: Callable[..., Any]) -> None:
        self.forward = forward

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)


def _nothing() -> None:
    """What `compile_options` hands torch.compile to check the options."""
