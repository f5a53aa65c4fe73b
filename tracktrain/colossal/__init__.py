"""Colossal-AI's Engine/Trainer-era API at Colossal-AI's module paths, on tracktrain, so that a Colossal-AI training
script runs with `colossalai` changed to `tracktrain.colossal` in its imports and nothing else::

    import tracktrain.colossal as colossalai
    from tracktrain.colossal.core import global_context as gpc
    from tracktrain.colossal.trainer import Trainer, hooks

`launch_from_torch(config=...)` loads the config into `gpc.config` and joins the process group; `initialize` applies
the config's features (`fp16`, `gradient_accumulation`, `clip_grad_norm`, `parallel`) and returns the `Engine`, a
tracktrain `ModelEngine`; the `Trainer` is a thin front for `tracktrain.Trainer`, each hook a built-in callback. The
modules: `amp`, `context`, `core`, `engine`, `logging`, `nn` (`lr_scheduler`, `metric`), `trainer` (`hooks`),
`utils`. What is refused, and why: docs/migration/colossal-ai.md.
"""

from __future__ import annotations

from tracktrain.colossal.initialize import (
    get_default_parser,
    initialize,
    launch,
    launch_from_openmpi,
    launch_from_slurm,
    launch_from_torch,
)
from tracktrain.colossal.logging import get_dist_logger
from tracktrain.colossal.trainer import Trainer, hooks
from tracktrain.colossal.utils import MultiTimer, get_dataloader

__all__ = [
    "MultiTimer",
    "Trainer",
    "get_dataloader",
    "get_default_parser",
    "get_dist_logger",
    "hooks",
    "initialize",
    "launch",
    "launch_from_openmpi",
    "launch_from_slurm",
    "launch_from_torch",
]
