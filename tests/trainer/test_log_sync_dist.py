"""self.log(..., sync_dist=True) under torch.distributed: two real gloo processes, each with its own data.

Each rank trains on different batches (different counts and sizes); the epoch values logged with sync_dist
must be those of all ranks' data together on both ranks, while values without sync_dist stay per rank.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tracktrain import Trainer
from tracktrain.distributed.collectives import init_from_env, spawn

from ._tasks import Classifier

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(90)]

WORLD_SIZE = 2


def rank_batches(rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(10 + rank)
    sizes = (5, 9, 3) if rank == 0 else (7, 2)
    return [(torch.randn(n, 4, generator=g), torch.randint(0, 2, (n,), generator=g)) for n in sizes]


class Logs(Classifier):
    def train_step(self, batch, batch_idx):
        x, _ = batch
        self.log("mean_synced", x[:, 0].mean(), on_step=False, on_epoch=True, sync_dist=True)
        self.log("mean_local", x[:, 0].mean(), on_step=False, on_epoch=True)
        self.log("sum_synced", x[:, 0].sum(), on_step=False, on_epoch=True, reduce="sum", sync_dist=True)
        self.log("max_synced", x[:, 0].max(), on_step=False, on_epoch=True, reduce="max", sync_dist=True)
        self.log("min_synced", x[:, 0].min(), on_step=False, on_epoch=True, reduce="min", sync_dist=True)
        return super().train_step(batch, batch_idx)


def _worker(out_dir: str) -> None:
    init_from_env()  # the Trainer itself runs single-device: only the logged values are reduced across ranks
    rank = dist.get_rank()
    trainer = Trainer(max_epochs=1, enable_progress_bar=False, enable_checkpointing=False, default_root_dir=out_dir)
    trainer.fit(Logs(), rank_batches(rank))
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(trainer.logged_metrics))


def test_sync_dist_reduces_epoch_values_across_ranks(tmp_path):
    spawn(_worker, WORLD_SIZE, args=(str(tmp_path),))
    results = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(WORLD_SIZE)]
    everything = torch.cat([x[:, 0] for rank in range(WORLD_SIZE) for x, _ in rank_batches(rank)])
    for result in results:
        assert result["mean_synced"] == pytest.approx(float(everything.mean()), rel=1e-5)
        assert result["sum_synced"] == pytest.approx(float(everything.sum()), rel=1e-5)
        assert result["max_synced"] == pytest.approx(float(everything.max()))
        assert result["min_synced"] == pytest.approx(float(everything.min()))
    for rank, result in enumerate(results):
        own = torch.cat([x[:, 0] for x, _ in rank_batches(rank)])
        assert result["mean_local"] == pytest.approx(float(own.mean()), rel=1e-5)
