"""scripts/gpu-check.sh --dry-run: the GPU check runs whole on the CPU, so it cannot rot between GPU windows (the
script is run for real only when a GPU is lent, with no chance to fix it there)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_dry_run_runs_every_part_and_writes_its_report(tmp_path):
    environment = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable}
    result = subprocess.run(
        ["bash", "scripts/gpu-check.sh", "--dry-run"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    assert report["dry_run"] is True
    assert set(report["environment"]["imports"].values()) == {"ok"}
    # every file that uses the marker is run, the new CUDA tests among them; without a device they all skip
    assert "tests/metrics/test_device.py" in report["test_files"]
    assert any(name.startswith("tests/cuda/") for name in report["test_files"])
    counts = report["parts"]["tests"]["junit"]["counts"]
    assert counts.get("skipped", 0) >= 10 and set(counts) == {"skipped"}, counts
    # the benchmark timed each workload's three variants and both kinds of checkpoint save
    steps = report["bench"]["steps"]
    assert set(steps) == {"transformer", "mlp"}
    for workload in steps.values():
        assert set(workload["variants"]) == {"hand-written", "tracktrain", "lightning"}
        # a difference of two short fits: under load it may come out at or below 0, but it is a number
        assert all(math.isfinite(variant["us_per_step"]) for variant in workload["variants"].values())
    assert set(report["bench"]["checkpoint"]["stall_ms"]) == {"blocking", "async", "async, pageable copies"}
    assert report["bench"]["problems"] == []
    table = (tmp_path / "gpu-check.md").read_text()
    assert "dry run on the CPU" in table and "| tracktrain |" in table
    assert table in result.stdout  # the table is printed, for a reader of the command's output
