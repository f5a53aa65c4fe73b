"""benchmarks/bench_pipeline.py: the --quick run completes on 2 gloo ranks, reports every schedule, the ranks split
the model's cost between them, no step beats the schedule's critical path, and the measured bubble is the one
predicted (within a generous margin above it: a slow machine only adds to it); the bubble formula and the summary's
arithmetic are pinned on made-up numbers.

The costs are sleeps, so the time a step takes has a hard lower bound; only lower bounds and structure are asserted
tightly, never how fast the machine is.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_pipeline.py"
SCHEDULES = ["gpipe", "1f1b", "interleaved_1f1b"]
STAGES_PER_RANK = {"gpipe": 1, "1f1b": 1, "interleaved_1f1b": 2}


def expected_bubble(schedule: str, ranks: int, microbatches: int) -> float:
    """Megatron-LM (Narayanan et al. 2021, §2.2): (p − 1) / (v·m + p − 1) of the step, v stages per rank."""
    return (ranks - 1) / (STAGES_PER_RANK[schedule] * microbatches + ranks - 1)


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("bench_pipeline", "pipeline_fits", "harness")


@pytest.mark.slow  # ~20 s: one process, then 3 schedules × 4 steps on 2 gloo ranks, sleeping their costs
@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_quick_run_reports_every_schedule_and_the_bubble_it_predicts(tmp_path, positive):
    out = tmp_path / "pipeline.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=230,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "| case | variant | value |" in result.stdout

    payload = json.loads(out.read_text())
    assert payload["problems"] == []  # every stage on one rank, the first loss the one process's, ranks agree
    arguments, workload = payload["arguments"], payload["workload"]
    rows = {row["variant"]: row for row in payload["rows"]}
    ranks, microbatches = arguments["world_sizes"], arguments["microbatches"]
    assert ranks == [2] and microbatches == [4]
    expected = {f"{s}/p{p}/m{m}" for s in SCHEDULES for p in ranks for m in microbatches}
    assert set(rows) == expected | {"one-process"}
    steps = arguments["repeats"] * arguments["steps"]
    cost_ms = workload["blocks"] * workload["forward_ms"] * (1 + workload["backward_ratio"])  # the whole model

    base = rows["one-process"]
    assert len(base["samples"]) == steps and all(map(positive, base["samples"]))
    assert min(base["samples"]) >= 0.99 * cost_ms  # one process sleeps every block's cost
    assert base["slept_ms"] >= 0.99 * cost_ms
    for key in sorted(expected):
        row = rows[key]
        schedule, p, m = key.split("/")[0], row["ranks"], row["M"]
        predicted = expected_bubble(schedule, p, m)
        assert row["stages"] == STAGES_PER_RANK[schedule] * p and row["baseline"] == "one-process", key
        assert row["predicted_bubble"] == pytest.approx(predicted), key
        assert row["critical_path_ms"] == pytest.approx(cost_ms / p / (1 - predicted)), key
        assert len(row["samples"]) == steps and positive(row["cpu_ms"]), key
        # the ranks split the cost: each slept at least its share and well under the whole model's
        assert 0.99 * cost_ms / p <= row["slept_ms"] < 0.75 * cost_ms, key
        # no step beats the schedule's critical path (sleeps never end early) ...
        assert min(row["samples"]) >= 0.99 * row["critical_path_ms"], key
        assert row["measured_bubble"] >= predicted - 0.01, key
        # ... and the schedule idles about as predicted: a generous margin, which only a very busy machine fills
        assert row["measured_bubble"] <= predicted + 0.3, (key, row["measured_bubble"], predicted)
        assert row["measured_bubble"] == pytest.approx(1 - cost_ms / p / row["value"]), key
    # interleaving 2 stages per rank predicts, and gives, the smaller bubble
    assert rows["interleaved_1f1b/p2/m4"]["predicted_bubble"] < rows["gpipe/p2/m4"]["predicted_bubble"]


def test_the_predicted_bubble_is_megatrons(bench):
    assert bench.predicted_bubble("gpipe", 2, 4) == pytest.approx(1 / 5)
    assert bench.predicted_bubble("1f1b", 4, 8) == pytest.approx(3 / 11)
    assert bench.predicted_bubble("interleaved_1f1b", 2, 4) == pytest.approx(1 / 9)
    assert bench.predicted_bubble("interleaved_1f1b", 4, 8) == pytest.approx(3 / 19)
    for schedule in SCHEDULES:
        assert bench.predicted_bubble(schedule, 1, 4) == 0  # one rank never waits
        assert bench.stage_count(schedule, 4) == STAGES_PER_RANK[schedule] * 4


def test_a_cost_block_sleeps_in_proportion_to_its_rows_forward_and_twice_that_backward(bench):
    block = bench.CostBlock(bench.WIDTH, seconds_per_sample=0.02 / 8)  # 20 ms for 8 rows
    x = torch.randn(4, bench.WIDTH, requires_grad=True)
    bench.BUSY[0] = 0.0
    started = time.perf_counter()
    y = block(x)
    forward = time.perf_counter() - started
    assert forward >= 0.01 and bench.BUSY[0] >= 0.01  # 4 rows: half of 20 ms
    slept = bench.BUSY[0]
    y.sum().backward()
    assert bench.BUSY[0] - slept >= 0.02  # the backward sleeps twice the forward
    assert x.grad is not None and torch.all(torch.isfinite(x.grad))
    assert torch.equal(y, torch.tanh(block.linear(x)))  # the cost is an identity
    bench.BUSY[0] = 0.0
    assert block.to("meta")(torch.empty(4, bench.WIDTH, device="meta")).is_meta
    assert bench.BUSY[0] == 0.0  # shape inference on meta tensors costs nothing


def test_the_summary_takes_the_slowest_rank_per_step_and_the_bubble_from_the_ideal_busy_time(bench):
    config = bench.PipelineConfig(
        blocks=4,
        batch_size=8,
        forward_ms=10.0,
        microbatches=(4,),
        world_sizes=(2,),
        schedules=("gpipe",),
        warmup=1,
        repeats=1,
        steps=3,
        seed=0,
        threads=1,
        out_dir="",
    )
    base = {"times": [0.125, 0.120, 0.130], "busy": [0.12, 0.12, 0.12], "cpu": [0.002] * 3, "first_loss": 1.0}
    ranks = [
        {"times": {"gpipe/4": [0.070, 0.090, 0.080]}, "busy": {"gpipe/4": [0.06] * 3}, "cpu": {"gpipe/4": [0.004] * 3}},
        {
            "times": {"gpipe/4": [0.080, 0.075, 0.085]},
            "busy": {"gpipe/4": [0.061, 0.062, 0.06]},
            "cpu": {"gpipe/4": [0.003, 0.005, 0.003]},
        },
    ]
    rows = {row["variant"]: row for row in bench.summarize(config, base, {2: ranks}, "median")}
    row = rows["gpipe/p2/m4"]
    assert row["samples"] == pytest.approx([80.0, 90.0, 85.0])  # per step the slower rank's
    assert row["value"] == pytest.approx(85.0) and row["baseline"] == "one-process"
    assert row["critical_path_ms"] == pytest.approx(75.0)  # 2 blocks × (10 + 20) ms / (1 − 1/5)
    assert row["measured_bubble"] == pytest.approx(1 - 60 / 85)
    assert row["ratio"] == pytest.approx(statistics.median([80 / 125, 90 / 120, 85 / 130]))  # paired per step
