"""benchmarks/bench_fsdp.py: the --quick run completes with every sanity field consistent (the Trainer's FSDP fit
lands on the hand-written FSDP2 loop's weights, each rank holds half of the parameters and of AdamW's state); its
sanity checks and its verdicts can fail.

No timing or memory figure is asserted: on a shared machine any ordering of the numbers can happen in a quick run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tracktrain.trainer.strategies.fsdp import blocks_to_shard

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_fsdp.py"


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("bench_fsdp", "fsdp_fits", "workloads", "harness")


@pytest.mark.slow  # ~60 s on 2 busy cores: 2 rounds of 3 fits in 2 processes, then 1 memory launch of 2 fits
@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_quick_run_reports_consistent_sanity_fields(tmp_path, positive, bench):
    out = tmp_path / "fsdp.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=230,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Goal (the Trainer's FSDP step ≤ 2 % over the hand-written one): met in" in result.stdout
    assert "| case | variant | value |" in result.stdout

    payload = json.loads(out.read_text())
    assert payload["problems"] == []
    titles = bench.TITLES
    variants = ["raw", "tracktrain"] + ([] if payload["environment"]["lightning"].startswith("not") else ["lightning"])
    rows = {(row["case"], row["variant"]): row for row in payload["rows"]}
    for variant in variants:
        for case in ("step", "step, CPU time"):
            samples = rows[(case, titles[variant])]["samples"]
            assert len(samples) == payload["arguments"]["repeats"] and all(positive(sample) for sample in samples)
        # every variant's ranks hold half of the parameters, and it trained the hand-written loop's weights
        assert payload["local_share"][variant] == pytest.approx(0.5, abs=0.01), variant
    # one thread, the same kernels in the same order: the Trainer lands exactly where the hand-written loop does
    ours = rows[("step", titles["tracktrain"])]
    assert ours["weight_diff"] == 0.0 and ours["baseline"] == titles["raw"]
    assert ours["goal"].split(": ")[-1].split()[0] in ("yes", "NO")

    # --quick: DDP and FSDP in turn in one launch, glibc's mmap threshold lowered
    ddp, fsdp = (
        rows[("memory, malloc live", bench.MEMORY_TITLES["ddp"])],
        rows[("memory, malloc live", titles["tracktrain"])],
    )
    # parameters, gradients and AdamW's state: a rank holds all of them under DDP, half under FSDP
    assert fsdp["state_mib"] / ddp["state_mib"] == pytest.approx(0.5, abs=0.01)
    assert ddp["state_mib"] == pytest.approx(4 * 16.80e6 * 4 / 2**20, rel=0.01)
    for row in (ddp, fsdp):
        assert positive(row["value"]) and len(row["samples"]) == 1
        assert row["built_mib"] == pytest.approx(64, rel=0.1)  # the full model, built on every rank


def _fit(bench, variant, **changes):
    result = {
        "variant": variant,
        "rss_before": 100,
        "peak_before": 100,
        "rss_built": 200,
        "peak": 500,
        "local_parameter_bytes": bench.MEMORY_SHAPE.parameters * 4 // (1 if variant == "ddp" else 2),
        "steps": 2,
        "checksum": 1.5,
        "mmap_threshold": "65536",
    }
    result["optimizer_state_bytes"] = 2 * result["local_parameter_bytes"]
    return {**result, **changes}


def test_memory_checks_catch_an_unsharded_or_unmeasured_fit(bench, tmp_path):
    config = bench.MemoryConfig(bench.MEMORY_SHAPE, 16, 2, 0, 1, str(tmp_path), str(tmp_path))
    assert bench.check_memory_launch(config, "live", "ddp", [_fit(bench, "ddp"), _fit(bench, "ddp")]) == []
    assert bench.check_memory_launch(config, "live", "fsdp", [_fit(bench, "fsdp"), _fit(bench, "fsdp")]) == []
    whole = bench.MEMORY_SHAPE.parameters * 4
    bad = [
        _fit(bench, "fsdp", local_parameter_bytes=whole, optimizer_state_bytes=2 * whole, steps=1),
        _fit(bench, "fsdp", peak=100, checksum=2.5, mmap_threshold=None, optimizer_state_bytes=whole // 2),
    ]
    text = "\n".join(bench.check_memory_launch(config, "live", "fsdp", bad))
    assert "[memory] live fsdp rank 0: took 1 steps, expected 2" in text
    assert "[memory] live fsdp rank 0: holds 1.000 of the parameters, expected 0.5" in text
    assert "[memory] live fsdp rank 1: ran with MALLOC_MMAP_THRESHOLD_=None" in text
    assert "[memory] live fsdp rank 1: the fit did not raise the peak RSS" in text
    assert "[memory] live fsdp rank 1: AdamW's state is 1.000 × its parameters, expected 2" in text
    assert "[memory] live fsdp: the ranks ended with different weights" in text
    # glibc's defaults: no threshold expected
    assert bench.check_memory_launch(config, "default", "ddp", [_fit(bench, "ddp")] * 2)[0].endswith("=65536")


def test_step_verdicts_follow_the_overhead_and_the_noise(bench):
    def goal(raw, ours):
        return bench.ratio_goal({"raw": raw, "tt": ours}, "raw", "tt", 1.02)["goal"]["tt"]

    steady = [1000.0] * 5
    assert goal(steady, [1015.0] * 5) == "1.015 ≤ 1.02: yes"
    assert goal(steady, [1100.0] * 5) == "1.100 ≤ 1.02: NO"
    # an interquartile range of 10 % hides a margin of 1 %
    assert goal([900.0, 950, 1000, 1050, 1100], [930.0, 980, 1030, 1080, 1130]).endswith("NO (within noise)")


def test_the_step_workload_is_the_issues_block_stack(bench):
    shape = bench.STEP_SHAPE
    net = shape.build(0)
    assert len(net.blocks) == 4 and net.blocks[0].up.in_features == 256 and net.blocks[0].up.out_features == 1024
    assert sum(p.numel() for p in net.parameters()) == shape.parameters
    assert blocks_to_shard(net, None) == list(net.blocks)  # what the Trainer shards by default
