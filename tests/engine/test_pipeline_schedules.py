"""Pipeline schedules (`ModelEngine(schedule=PipelineSchedule(...))`, Colossal-AI's `execute_schedule`) with real gloo
processes: GPipe, 1F1B and interleaved 1F1B on 2 ranks (and GPipe, 1F1B on 4) train what one process trains on the
whole batch — the same parameters after several AdamW steps, the same loss on every rank at every step."""

from __future__ import annotations

import json
import os

import pytest
import torch
import torch.distributed as dist
from torch import nn

from tracktrain.distributed.collectives import init_from_env, spawn
from tracktrain.engine import ModelEngine
from tracktrain.engine.pipeline import PipelineSchedule, split_stages

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]

STEPS = 3
BATCH = 8


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    layers = []
    for index in range(8):
        layers += [(f"linear{index}", nn.Linear(6, 6)), (f"act{index}", nn.Tanh())]
    layers.append(("head", nn.Linear(6, 3)))
    from collections import OrderedDict

    return nn.Sequential(OrderedDict(layers))


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        (torch.randn(BATCH, 6, generator=generator), torch.randint(0, 3, (BATCH,), generator=generator))
        for _ in range(STEPS)
    ]


def _split_points(stages: int) -> list[str]:
    every = 8 // stages  # cut the 8 linear layers evenly
    return [f"linear{index}" for index in range(every, 8, every)]


def _one_process() -> tuple[dict[str, list], list[float]]:
    model = _model()
    engine = ModelEngine(model, torch.optim.AdamW(model.parameters(), lr=0.05), nn.CrossEntropyLoss())
    losses = []
    for batch in _batches():
        engine.zero_grad()
        _, _, loss = engine.execute_schedule(iter([batch]))
        engine.step()
        losses.append(float(loss.detach()))
    return {name: tensor.flatten().tolist() for name, tensor in model.state_dict().items()}, losses


def _pipeline(out: str, schedule: str, stages: int, microbatches: int) -> None:
    stage_modules = split_stages(_model(), _split_points(stages))
    pipeline = PipelineSchedule(stage_modules, num_microbatches=microbatches, schedule=schedule)
    local = pipeline.local_model
    engine = ModelEngine(
        local, torch.optim.AdamW(local.parameters(), lr=0.05), nn.CrossEntropyLoss(), schedule=pipeline
    )
    assert engine.uses_pipeline
    losses = []
    for batch in _batches():
        engine.zero_grad()
        output, label, loss = engine.execute_schedule(iter([batch]))
        engine.step()
        losses.append(float(loss.detach()))
        if pipeline.holds_last_stage:
            assert output.shape == (BATCH, 3) and torch.equal(label, batch[1])
        else:
            assert output is None
    params = {name: tensor.flatten().tolist() for stage in local for name, tensor in stage.state_dict().items()}
    record = {"params": params, "losses": losses, "stages": pipeline.stage_indices}
    with open(os.path.join(out, f"{schedule}_{stages}_rank{dist.get_rank()}.json"), "w") as file:
        json.dump(record, file)


def _every_schedule(out: str, cases: list[tuple[str, int, int]]) -> None:
    init_from_env()  # the process group, from the environment spawn sets as torchrun does
    for schedule, stages, microbatches in cases:
        _pipeline(out, schedule, stages, microbatches)


def _check(tmp_path, schedule: str, stages: int, ranks: int) -> None:
    expected_params, expected_losses = _one_process()
    records = [json.loads((tmp_path / f"{schedule}_{stages}_rank{rank}.json").read_text()) for rank in range(ranks)]
    held = sorted(index for record in records for index in record["stages"])
    assert held == list(range(stages))  # every stage on exactly one rank
    merged: dict[str, list] = {}
    for record in records:
        assert not merged.keys() & record["params"].keys()
        merged.update(record["params"])
        assert record["losses"] == pytest.approx(expected_losses, abs=1e-6)  # the loss on every rank
    assert merged.keys() == expected_params.keys()
    for name, values in expected_params.items():
        assert merged[name] == pytest.approx(values, abs=1e-5), name


CASES_2 = [("gpipe", 2, 4), ("1f1b", 2, 4), ("interleaved_1f1b", 4, 4)]


@pytest.mark.slow  # 20 s of ranks; CI runs the slow tests
def test_each_schedule_on_two_ranks_trains_what_one_process_trains_on_the_whole_batch(tmp_path):
    spawn(_every_schedule, 2, args=(str(tmp_path), CASES_2))
    for schedule, stages, _ in CASES_2:
        _check(tmp_path, schedule, stages, 2)


CASES_4 = [("gpipe", 4, 4), ("1f1b", 4, 8), ("interleaved_1f1b", 8, 4)]


@pytest.mark.slow  # 4 ranks on 2 cores; CI runs the slow tests
def test_each_schedule_on_four_ranks_trains_what_one_process_trains(tmp_path):
    spawn(_every_schedule, 4, args=(str(tmp_path), CASES_4))
    for schedule, stages, _ in CASES_4:
        _check(tmp_path, schedule, stages, 4)


def test_split_stages_cuts_before_the_named_children_and_keeps_their_names():
    stages = split_stages(_model(), ["linear4"])
    assert [list(dict(stage.named_children())) for stage in stages] == [
        ["linear0", "act0", "linear1", "act1", "linear2", "act2", "linear3", "act3"],
        ["linear4", "act4", "linear5", "act5", "linear6", "act6", "linear7", "act7", "head"],
    ]
    x = torch.randn(2, 6)
    assert torch.equal(stages[1](stages[0](x)), _model()(x))
    with pytest.raises(ValueError, match=r"\['nope'\].*split points are names of the model's children"):
        split_stages(_model(), ["nope"])
    with pytest.raises(ValueError, match="distinct children in the model's order"):
        split_stages(_model(), ["linear4", "linear2"])
