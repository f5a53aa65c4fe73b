"""benchmarks/bench_dcp.py: the --quick run completes, reports every variant, and its sanity checks pass (every
checkpoint committed, every load bit for bit the state saved, on 2 ranks, 1 process and 4 ranks); the summaries'
arithmetic and the load check are pinned on made-up numbers.

No timing is asserted: on a shared machine any ordering of the numbers can happen in a quick run.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_dcp.py"
HAS_LIGHTNING = importlib.util.find_spec("lightning") is not None


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("bench_dcp", "dcp_fits", "fsdp_fits", "workloads")


@pytest.mark.slow  # 75-150 s on 2 busy cores: 2 rounds of 10 short fits and 4 loads on 2 ranks, then 4 ranks
@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_quick_run_reports_every_variant_and_passes_its_checks(tmp_path, positive):
    out = tmp_path / "dcp.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out), "--root-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=290,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for heading in (
        "## Loop stall per checkpoint, 2 gloo ranks",
        "## Load on 2 gloo ranks",
        "## Resharding: the 2-rank checkpoints loaded on 1 process and on 4 ranks",
    ):
        assert heading in result.stdout
    assert "bench_dcp.py --quick" in result.stdout  # the command that produced the table

    payload = json.loads(out.read_text())
    assert payload["problems"] == []
    arguments = payload["arguments"]
    saving = ["tt-sharded-async", "tt-sharded-blocking", "tt-full-async", "tt-full-blocking"]
    saving += ["dcp.save", "dcp.async_save"] + (["fabric"] if HAS_LIGHTNING else [])
    baselines = ["tt-none", "raw-none"] + (["fabric-none"] if HAS_LIGHTNING else [])
    assert sorted(payload["saves"]) == sorted(saving + baselines)
    for variant in saving:
        row = payload["saves"][variant]
        assert len(row["stall_samples_ms"]) == arguments["saves"] * arguments["repeats"], variant
        assert all(map(positive, row["stall_samples_ms"])), variant
        assert len(row["added_samples_ms"]) == arguments["repeats"], variant
        assert all(math.isfinite(value) for value in row["added_samples_ms"]), variant
        assert math.isclose(row["ratio_to_dcp_save"], row["stall_ms"] / payload["saves"]["dcp.save"]["stall_ms"])
    for variant in baselines:
        assert payload["saves"][variant]["stall_samples_ms"] == [] and positive(payload["saves"][variant]["fit_s"])

    loads = ["tt-sharded", "tt-full", "dcp.load"] + (["fabric.load"] if HAS_LIGHTNING else [])
    assert sorted(payload["loads"]) == sorted(loads)
    for kind in loads:
        assert len(payload["loads"][kind]["samples_ms"]) == arguments["load_repeats"], kind
        assert all(map(positive, payload["loads"][kind]["samples_ms"])), kind
        # each checkpoint holds the weights and AdamW's two moments (and little else)
        assert 0.9 * payload["state_mb"] < payload["sizes_mb"][kind] < 1.2 * payload["state_mb"] + 0.5, kind
    assert payload["loads"]["dcp.load"]["ratio"] == 1
    assert sorted(payload["reshard"]) == sorted(
        ["read_checkpoint(url)", "tt-1-process", "dcp.load-1-process", "4:tt-sharded", "4:dcp.load"]
    )
    assert all(positive(row["ms"]) for row in payload["reshard"].values())


def test_a_save_summary_is_the_slowest_rank_and_the_fit_beyond_its_baseline(bench):
    # two ranks, one fit of 2 saves each: per save the slower rank's stall
    per_rank = [{"dcp.save": [[0.10, 0.30]], "tt-sharded-async": [[0.01, 0.02]]}]
    per_rank.append({"dcp.save": [[0.20, 0.10]], "tt-sharded-async": [[0.03, 0.01]]})
    assert bench.per_save_max(per_rank, "dcp.save") == [[0.20, 0.30]]
    stalls = {name: bench.per_save_max(per_rank, name) for name in ("dcp.save", "tt-sharded-async")}
    stalls["tt-none"] = stalls["raw-none"] = [[]]
    totals = {"dcp.save": [2.0], "tt-sharded-async": [1.5], "tt-none": [1.4], "raw-none": [1.0]}
    rows = bench.summarize_saves(stalls, totals, 2, "median")
    assert rows["dcp.save"]["stall_ms"] == pytest.approx(250.0)
    assert rows["tt-sharded-async"]["stall_ms"] == pytest.approx(25.0)
    assert rows["tt-sharded-async"]["ratio_to_dcp_save"] == pytest.approx(0.1)
    assert rows["tt-sharded-async"]["paired_ratio"] == pytest.approx(0.1)
    # (1.5 s − 1.4 s of the tracktrain fit without checkpoints) / 2 saves; the raw loop's against its own baseline
    assert rows["tt-sharded-async"]["added_ms"] == pytest.approx(50.0)
    assert rows["dcp.save"]["added_ms"] == pytest.approx(500.0)
    assert rows["tt-none"]["stall_ms"] is None and rows["tt-none"]["added_ms"] is None


def test_the_load_check_catches_another_state_or_step(bench):
    reference = {"model/w": torch.ones(3), "optim/w/exp_avg": torch.zeros(3)}
    same = bench.Load(0.1, 0.2, {name: value.clone() for name, value in reference.items()}, 4)
    assert bench.check_load(same, reference, 4, "[t]") == []
    changed = {**reference, "model/w": torch.tensor([1.0, 1.0, 1.0 + 1e-7])}
    problems = bench.check_load(bench.Load(0.1, 0.2, changed, 3), reference, 4, "[t]")
    assert problems == [
        "[t]: loaded step 3, the checkpoint's is 4",
        "[t]: the loaded state is not the saved one: model/w differs",
    ]
    missing = bench.check_load(bench.Load(0.1, 0.2, {"model/w": torch.ones(3)}, 4), reference, 4, "[t]")
    assert missing == ["[t]: the loaded state is not the saved one: different entries: ['optim/w/exp_avg']"]


def test_plain_full_state_names_the_optimizer_state_by_parameter(bench):
    model = {"net.a": torch.ones(2), "net.b": torch.zeros(1)}
    optimizer = {"state": {0: {"exp_avg": torch.ones(2)}, 1: {"exp_avg": torch.zeros(1)}}, "param_groups": []}
    state = bench.plain_full_state(model, optimizer, ["net.a", "net.b"])
    assert sorted(state) == ["model/net.a", "model/net.b", "optim/net.a/exp_avg", "optim/net.b/exp_avg"]
