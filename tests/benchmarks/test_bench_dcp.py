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
def test_quick_run_reports_every_variant_and_passes_its_checks(tmp_path, positive, bench):
    out = tmp_path / "dcp.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out), "--root-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=290,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "| case | variant | value |" in result.stdout
    payload = json.loads(out.read_text())
    assert payload["problems"] == []
    arguments = payload["arguments"]
    rows = {(row["case"], row["variant"], row["baseline"]): row for row in payload["rows"]}
    titles = bench.TITLES
    saving = ["tt-sharded-async", "tt-sharded-blocking", "tt-full-async", "tt-full-blocking", "dcp.async_save"]
    saving += ["fabric"] if HAS_LIGHTNING else []
    for variant in saving:
        stall = rows[("stall", titles[variant], titles["dcp.save"])]
        assert len(stall["samples"]) == arguments["saves"] * arguments["repeats"] and all(
            map(positive, stall["samples"])
        )
        added = rows[("added", titles[variant], titles["dcp.save"])]
        assert len(added["samples"]) == arguments["repeats"] and all(map(math.isfinite, added["samples"]))
    for variant, baseline in (("tt-sharded-async", "tt-none"), ("dcp.save", "raw-none")):
        assert positive(rows[("fit", titles[variant], titles[baseline])]["value"])
    loads = ["tt-sharded", "tt-full"] + (["fabric.load"] if HAS_LIGHTNING else [])
    for kind in loads:
        row = rows[("load", titles[kind], titles["dcp.load"])]
        assert len(row["samples"]) == arguments["load_repeats"] and all(map(positive, row["samples"])), kind
        # each checkpoint holds the weights and AdamW's two moments (and little else)
        assert 0.9 * payload["state_mb"] < row["MB"] < 1.2 * payload["state_mb"] + 0.5, kind
    variants = {variant for case, variant, _ in rows if case == "load"}
    assert {f"4 ranks: {titles['tt-sharded']}", f"4 ranks: {titles['dcp.load']}"} <= variants
    assert (
        sum(
            variant.startswith(("tracktrain sharded: read", "tracktrain sharded: single", "hand-written: dcp.load("))
            for variant in variants
        )
        == 3
    )


def test_save_rows_take_the_slowest_rank_and_the_fit_beyond_its_baseline(bench):
    # two ranks, one fit of 2 saves each: per save the slower rank's stall
    per_rank = [{"dcp.save": [[0.10, 0.30]], "tt-sharded-async": [[0.01, 0.02]]}]
    per_rank.append({"dcp.save": [[0.20, 0.10]], "tt-sharded-async": [[0.03, 0.01]]})
    assert bench.per_save_max(per_rank, "dcp.save") == [[0.20, 0.30]]
    stalls = {name: bench.per_save_max(per_rank, name) for name in ("dcp.save", "tt-sharded-async")}
    stalls["tt-none"] = stalls["raw-none"] = [[]]
    totals = {"dcp.save": [2.0], "tt-sharded-async": [1.5], "tt-none": [1.4], "raw-none": [1.0]}
    rows = {(row["case"], row["variant"]): row for row in bench.save_rows(stalls, totals, 2, "median")}
    ours, raw = bench.TITLES["tt-sharded-async"], bench.TITLES["dcp.save"]
    assert rows[("stall", raw)]["value"] == pytest.approx(250.0)
    assert rows[("stall", ours)]["value"] == pytest.approx(25.0)
    assert rows[("stall", ours)]["ratio"] == pytest.approx(0.1, rel=0.7)  # the median of per-save ratios
    # (1.5 s − 1.4 s of the tracktrain fit without checkpoints) / 2 saves; the raw loop's against its own baseline
    assert rows[("added", ours)]["value"] == pytest.approx(50.0)
    assert rows[("added", raw)]["value"] == pytest.approx(500.0)
    assert rows[("fit", ours)]["baseline"] == bench.TITLES["tt-none"] and ("stall", bench.TITLES["tt-none"]) not in rows


def test_the_load_check_catches_another_state_or_step(bench):
    reference = {"model/w": torch.ones(3), "optim/w/exp_avg": torch.zeros(3)}
    same = bench.Load(0.1, 0.2, {name: value.clone() for name, value in reference.items()}, 4)
    assert bench.check_load(same, reference, 4, "[t]") == []
    changed = {**reference, "model/w": torch.tensor([1.0, 1.0, 1.0 + 1e-7])}
    problems = bench.check_load(bench.Load(0.1, 0.2, changed, 3), reference, 4, "[t]")
    assert problems == [
        "[t]: loaded step 3, the checkpoint's is 4",
        "[t]: the loaded state is not the saved one: model/w: largest difference 1.19e-07",
    ]
    missing = bench.check_load(bench.Load(0.1, 0.2, {"model/w": torch.ones(3)}, 4), reference, 4, "[t]")
    assert missing == ["[t]: the loaded state is not the saved one: different entries: ['optim/w/exp_avg']"]


def test_plain_full_state_names_the_optimizer_state_by_parameter(bench):
    model = {"net.a": torch.ones(2), "net.b": torch.zeros(1)}
    optimizer = {"state": {0: {"exp_avg": torch.ones(2)}, 1: {"exp_avg": torch.zeros(1)}}, "param_groups": []}
    state = bench.plain_full_state(model, optimizer, ["net.a", "net.b"])
    assert sorted(state) == ["model/net.a", "model/net.b", "optim/net.a/exp_avg", "optim/net.b/exp_avg"]
