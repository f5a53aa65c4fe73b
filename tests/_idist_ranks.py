"""What each rank of the idist test does (a module of its own: spawned processes import the function by name)."""

from __future__ import annotations

import json
import os

import torch

import tracktrain.distributed as idist


def each_rank(local_rank: int, out_dir: str, scale: int) -> None:
    dataset = list(range(12))
    loader = idist.auto_dataloader(dataset, batch_size=4, shuffle=False, num_workers=0)
    model = idist.auto_model(torch.nn.Linear(2, 1))
    gathered = idist.all_gather(torch.tensor([float(idist.get_rank())]))
    result = {
        "local_rank": local_rank,
        "rank": idist.get_rank(),
        "world_size": idist.get_world_size(),
        "backend": idist.backend(),
        "model_name": idist.model_name(),
        "nproc_per_node": idist.get_nproc_per_node(),
        "sum": idist.all_reduce(float(idist.get_rank() + 1) * scale),
        "max": float(idist.all_reduce(torch.tensor(float(idist.get_rank())), op="MAX")),
        "gathered": gathered.tolist(),
        "gathered_text": idist.all_gather(f"rank{idist.get_rank()}"),
        "broadcast": idist.broadcast("from zero" if idist.get_rank() == 0 else None, src=0, safe_mode=True),
        "batches": [batch.tolist() for batch in loader],
        "ddp": type(model).__name__,
    }
    with open(os.path.join(out_dir, f"rank{idist.get_rank()}.json"), "w") as file:
        json.dump(result, file)
