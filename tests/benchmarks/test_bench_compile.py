"""benchmarks/bench_compile.py: the --quick run completes, every variant trained the eager hand-written loop's
weights, and each ratio is the one of its samples; its sanity check can fail.

No timing is asserted: on a shared machine any ordering of the numbers can happen in a quick run (and torch.compile
does not speed these small models up on this CPU)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_compile.py"


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("bench_compile", "workloads")


@pytest.mark.slow  # inductor compiles 4 graphs: ~30 s with a cold cache on 2 cores
@pytest.mark.timeout(300)
def test_quick_run_reports_every_variant_on_both_models(tmp_path, positive):
    out = tmp_path / "compile.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=290,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    payload = json.loads(out.read_text())
    assert payload["problems"] == []
    rows = {(row["case"], row["variant"], row["baseline"]): row for row in payload["rows"]}
    workloads = sorted({workload for workload, _, _ in rows})
    assert len(workloads) == 2 and any(name.startswith("transformer") for name in workloads)
    for workload in workloads:
        for key in (
            ("tracktrain eager", "hand-written eager"),
            ("tracktrain compile=True", "tracktrain eager"),
            ("tracktrain compile=True", "hand-written torch.compile"),
            ("hand-written eager", None),
        ):
            row = rows[(workload, *key)]
            assert all(positive(sample) for sample in row["samples"]), (workload, key)
            assert row["unit"] == "steps/s"
        compiled = rows[workload, "tracktrain compile=True", "tracktrain eager"]
        eager = rows[workload, "tracktrain eager", "hand-written eager"]
        ratios = [mine / theirs for mine, theirs in zip(compiled["samples"], eager["samples"])]
        assert compiled["ratio"] == pytest.approx(statistics.median(ratios))
        assert rows[workload, "hand-written eager", None]["ratio"] is None
    assert "| case | variant | value |" in result.stdout


def test_the_sanity_check_catches_other_weights_and_other_step_counts(bench):
    workload = bench.workloads(2)[0]
    reference = {name: value.clone() for name, value in workload.initial.items()}
    problems: list[str] = []
    fit = bench.Fit(1.0, 2, 4, workload.fresh())
    bench.check(workload, "same", fit, reference, 4, problems)
    assert problems == []
    with torch.no_grad():
        next(iter(fit.net.parameters())).add_(1e-3)
    bench.check(workload, "moved", fit, reference, 5, problems)
    assert len(problems) == 2 and "5" in problems[0] and "differs" in problems[1]
