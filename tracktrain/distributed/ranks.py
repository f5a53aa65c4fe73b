"""Which process this is in a distributed run: the one place rank-zero-only code asks."""

from __future__ import annotations

import os
import sys

__all__ = ["global_rank", "local_rank", "local_world_size", "node_rank", "rank_and_world_size"]


def _env_int(variable: str, default: int) -> int:
    text = os.environ.get(variable)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(
            f"The {variable} environment variable is {text!r}, not an integer. Unset it, or let torchrun set it."
        ) from None


def rank_and_world_size() -> tuple[int, int]:
    """This process's rank and the world size: from torch.distributed once a process group is initialized, else
    from RANK and WORLD_SIZE (torchrun sets them before the script calls init_process_group), else (0, 1)."""
    # Looked up, not imported: a process group exists only if torch.distributed was imported, and asking must
    # not cost a torch import.
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return _env_int("RANK", 0), _env_int("WORLD_SIZE", 1)


def global_rank() -> int:
    """This process's rank among all the job's processes (0 in a single process): `rank_and_world_size()[0]`."""
    return rank_and_world_size()[0]


def local_rank() -> int:
    """This process's rank on its machine (LOCAL_RANK, which torchrun sets; 0 without it)."""
    return _env_int("LOCAL_RANK", 0)


def local_world_size() -> int:
    """The processes on this machine (LOCAL_WORLD_SIZE, which torchrun sets; 1 without it)."""
    return _env_int("LOCAL_WORLD_SIZE", 1)


def node_rank() -> int:
    """This machine's rank among the job's machines (GROUP_RANK, which torchrun sets; 0 without it)."""
    return _env_int("GROUP_RANK", 0)
