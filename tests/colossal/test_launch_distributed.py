"""`launch_from_torch` under 2 gloo ranks: gpc's ranks and groups, `get_dataloader`'s shards, `initialize`'s DDP with
accumulation and clipping (the replicas stay equal), and `parallel.pipeline = 2` on tracktrain's pipeline schedule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from tests import _processes
from tracktrain.distributed.collectives import spawn

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(120)]


def _data_parallel_worker(out_dir: str) -> None:
    import tracktrain.colossal as colossalai
    from tracktrain.colossal.context import ParallelMode
    from tracktrain.colossal.core import global_context as gpc
    from tracktrain.colossal.utils import get_dataloader

    colossalai.launch_from_torch(config=dict(BATCH_SIZE=4, gradient_accumulation=2, clip_grad_norm=1.0), verbose=False)
    rank = gpc.get_global_rank()
    dataset = torch.utils.data.TensorDataset(torch.randn(32, 3), torch.randint(0, 2, (32,)))
    loader = get_dataloader(dataset, shuffle=True, batch_size=gpc.config.BATCH_SIZE)
    torch.manual_seed(rank)  # different initial weights: initialize makes them rank 0's
    model = nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    steps: list[int] = []
    optimizer.register_step_post_hook(lambda *_: steps.append(1))
    engine, loader, _, _ = colossalai.initialize(model, optimizer, nn.CrossEntropyLoss(), loader, verbose=False)
    seen = []
    for inputs, label in loader:
        seen += [float(x) for x in inputs[:, 0]]
        engine.zero_grad()
        engine.backward(engine.criterion(engine(inputs), label))
        engine.step()
    result = {
        "rank": rank,
        "sizes": [gpc.get_world_size(m) for m in (ParallelMode.GLOBAL, ParallelMode.DATA, ParallelMode.MODEL)],
        "data_rank": gpc.get_local_rank(ParallelMode.DATA),
        "pipeline": gpc.is_initialized(ParallelMode.PIPELINE),
        "ddp": isinstance(engine.model, nn.parallel.DistributedDataParallel),
        "batches": len(loader),
        "steps": len(steps),
        "seen": seen,
        "weight": model.weight.detach().flatten().tolist(),
    }
    Path(out_dir, f"rank_{rank}.json").write_text(json.dumps(result))
    gpc.destroy()


def test_two_data_parallel_ranks(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACKTRAIN_DIST_TIMEOUT", "60")
    with _processes.stopped_on_exit("the colossal launch test's ranks"):
        spawn(_data_parallel_worker, 2, args=(str(tmp_path),))
    ranks = [json.loads((tmp_path / f"rank_{rank}.json").read_text()) for rank in (0, 1)]
    assert [r["rank"] for r in ranks] == [0, 1] and [r["data_rank"] for r in ranks] == [0, 1]
    assert all(r["sizes"] == [2, 2, 1] and not r["pipeline"] and r["ddp"] for r in ranks)
    assert all(r["batches"] == 4 and r["steps"] == 2 for r in ranks)  # 16 samples each, 4 batches, 2 windows
    assert not set(ranks[0]["seen"]) & set(ranks[1]["seen"])  # each rank reads its own shard
    assert ranks[0]["weight"] == pytest.approx(ranks[1]["weight"])  # one replica: broadcast, then all-reduced


def _pipeline_worker(out_dir: str) -> None:
    import tracktrain.colossal as colossalai
    from tracktrain.colossal.context import ParallelMode
    from tracktrain.colossal.core import global_context as gpc

    colossalai.launch_from_torch(config=dict(NUM_MICRO_BATCHES=2, parallel=dict(pipeline=2)), verbose=False)
    torch.manual_seed(0)  # the same model on both ranks; each keeps its stage
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    reference = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    reference.load_state_dict(model.state_dict())
    engine, *_ = colossalai.initialize(
        model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(), verbose=False
    )
    batch = (torch.randn(4, 4, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 1, 1, 0]))
    engine.train()
    engine.zero_grad()
    _, _, loss = engine.execute_schedule(iter([batch]))
    engine.step()
    expected = nn.CrossEntropyLoss()(reference(batch[0]), batch[1])
    rank = gpc.get_global_rank()
    Path(out_dir, f"rank_{rank}.json").write_text(
        json.dumps(
            {
                "pipeline_rank": gpc.get_local_rank(ParallelMode.PIPELINE),
                "data_size": gpc.get_world_size(ParallelMode.DATA),
                "uses_pipeline": engine.uses_pipeline,
                "loss": float(loss),
                "expected": float(expected),
            }
        )
    )
    gpc.destroy()


def test_parallel_pipeline_runs_our_pipeline_schedule(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACKTRAIN_DIST_TIMEOUT", "60")
    with _processes.stopped_on_exit("the colossal pipeline test's ranks"):
        spawn(_pipeline_worker, 2, args=(str(tmp_path),))
    ranks = [json.loads((tmp_path / f"rank_{rank}.json").read_text()) for rank in (0, 1)]
    assert [r["pipeline_rank"] for r in ranks] == [0, 1] and all(r["data_size"] == 1 for r in ranks)
    assert all(r["uses_pipeline"] for r in ranks)
    assert all(r["loss"] == pytest.approx(r["expected"], rel=1e-5) for r in ranks)  # the whole model's loss
