"""PyTorch-Ignite's `ignite.utils` under its own path: logging set-up, seeding, moving tensors, one-hot encoding and
hashing a checkpoint file.

A face over our implementations: `convert_tensor`, `apply_to_tensor` and `apply_to_type` are the batch mapping of
`tracktrain.engine.batches` (the one the supervised steps use; `convert_tensor` passes values that are not tensors
through, where Ignite's raises a TypeError), `manual_seed` is `tracktrain.rng.manual_seed`
(the seeding the Trainer and `DeterministicEngine` use), and `setup_logger` asks `tracktrain.distributed.ranks`
which process this is.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import torch

from tracktrain.distributed.ranks import global_rank
from tracktrain.engine.batches import apply_to_type, convert_tensor
from tracktrain.rng import manual_seed

__all__ = [
    "apply_to_tensor",
    "apply_to_type",
    "convert_tensor",
    "hash_checkpoint",
    "manual_seed",
    "setup_logger",
    "to_onehot",
]


def apply_to_tensor(x: Any, func: Callable[[torch.Tensor], Any]) -> Any:
    """`func` applied to every tensor in `x` (see `apply_to_type`)."""
    return apply_to_type(x, torch.Tensor, func)


def to_onehot(indices: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Class indices of shape (N, ...) as a one-hot uint8 tensor of shape (N, num_classes, ...), on their device."""
    if not isinstance(indices, torch.Tensor):
        raise TypeError(f"to_onehot: indices must be a tensor of class indices, got {type(indices).__name__}.")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"to_onehot: num_classes must be a positive int, got {num_classes!r}.")
    shape = (indices.shape[0], num_classes, *indices.shape[1:])
    onehot = torch.zeros(shape, dtype=torch.uint8, device=indices.device)
    return onehot.scatter_(1, indices.unsqueeze(1), 1)


def setup_logger(
    name: str | None = "ignite",
    level: int = logging.INFO,
    stream: TextIO | None = None,
    format: str = "%(asctime)s %(name)s %(levelname)s: %(message)s",
    filepath: str | os.PathLike | None = None,
    distributed_rank: int | None = None,
    reset: bool = False,
    encoding: str | None = "utf-8",
) -> logging.Logger:
    """The logger `name`, set up as Ignite's `setup_logger` does: on rank 0 a stream handler (and a file handler
    with `filepath`) at `level` with `format`; on other ranks a NullHandler only, so one message is printed per job.

    A logger that already exists is returned as it is unless `reset=True` (its handlers are then replaced). A named
    logger does not propagate to the root logger. `distributed_rank`: this process's rank (default: asked of the
    process group, or RANK).
    """
    if distributed_rank is None:
        distributed_rank = global_rank()
    existing = name is None or name in logging.root.manager.loggerDict
    logger = logging.getLogger(name)
    if distributed_rank > 0 or reset:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
    if distributed_rank > 0:
        logger.addHandler(logging.NullHandler())
    if existing and not reset:
        return logger
    if distributed_rank == 0:
        logger.setLevel(level)
        formatter = logging.Formatter(format)
        handlers: list[logging.Handler] = [logging.StreamHandler(stream=stream)]
        if filepath is not None:
            handlers.append(logging.FileHandler(filepath, encoding=encoding))
        for handler in handlers:
            handler.setLevel(level)
            handler.setFormatter(formatter)
            logger.addHandler(handler)
    if name is not None:
        logger.propagate = False
    return logger


def hash_checkpoint(checkpoint_path: str | os.PathLike, output_dir: str | os.PathLike) -> tuple[Path, str]:
    """Move the checkpoint file to `output_dir` as `<stem>-<first 8 hex digits of its SHA-256>.pt` (the name
    `torch.hub` checks) and return the new path and the whole hash."""
    source = Path(checkpoint_path)
    if not source.exists():
        raise FileNotFoundError(f"{source.name} does not exist in {source.parent}.")
    target_dir = Path(output_dir)
    target_dir.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with source.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    sha = digest.hexdigest()
    target = target_dir / f"{source.stem}-{sha[:8]}.pt"
    shutil.move(os.fspath(source), target)
    return target, sha
