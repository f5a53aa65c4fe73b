"""What the DDP and FSDP tests share (tests/trainer/test_ddp.py, test_fsdp.py,
tests/callbacks/test_retention_after_restarts.py): a quiet strategy="ddp" Trainer, a crash at a step on every rank,
and a value saved by each rank as JSON and read back by the test, rank by rank."""

from __future__ import annotations

import json
from pathlib import Path

import torch.distributed as dist

from tracktrain import Trainer

from ._tasks import CrashAtStep

__all__ = ["CrashAtStep", "ddp_trainer", "load_per_rank", "save_per_rank"]


def ddp_trainer(root: str, **kwargs) -> Trainer:
    """strategy="ddp", 2 epochs, no progress bar or checkpoints, rooted in `root` (each option overridable)."""
    options = {
        "max_epochs": 2,
        "enable_progress_bar": False,
        "enable_checkpointing": False,
        "default_root_dir": root,
        "strategy": "ddp",
        **kwargs,
    }
    return Trainer(**options)


def save_per_rank(out: str, name: str, value) -> None:
    """In a rank: `value` as `<out>/<name>_rank<rank>.json` (`out` made here: only rank 0 makes the Trainer's root)."""
    Path(out).mkdir(parents=True, exist_ok=True)
    Path(out, f"{name}_rank{dist.get_rank()}.json").write_text(json.dumps(value))


def load_per_rank(out: Path, name: str, world_size: int = 2) -> list:
    """In the test: what each rank saved under `name`, in rank order."""
    return [json.loads((Path(out) / f"{name}_rank{rank}.json").read_text()) for rank in range(world_size)]
