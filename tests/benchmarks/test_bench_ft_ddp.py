"""benchmarks/bench_ft_ddp.py: the --quick run completes with its checks passed (each fit took its steps, the two
processes of a fit and ft_ddp and ddp ended on the same weights, the joining group was healed to the running group's
step and stepped with it), and reports both comparisons with their ratios. No timing is asserted."""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_ft_ddp.py"


@pytest.mark.skipif(importlib.util.find_spec("torchft") is None, reason="torchft is not installed")
@pytest.mark.slow  # ~20-45 s on 2 cores: 4 fits of 2 processes (2 with a lighthouse), 2 joins beside a running group
@pytest.mark.timeout(400)
def test_quick_run_passes_its_checks_and_reports_both_ratios(tmp_path, positive):
    out = tmp_path / "ft.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out), "--root-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=390,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    payload = json.loads(out.read_text())
    assert payload["problems"] == []
    rows = {(row["variant"], row["baseline"]): row for row in payload["rows"]}
    assert set(rows) == {("ddp", None), ("ft_ddp", "ddp"), ("plain start", None), ("ft_ddp join", "plain start")}
    for (variant, baseline), row in rows.items():
        assert all(positive(sample) for sample in row["samples"]), variant
        if baseline is not None:
            base = rows[baseline, None]["samples"]
            assert row["ratio"] == pytest.approx(statistics.median(a / b for a, b in zip(row["samples"], base)))
    assert rows["ft_ddp", "ddp"]["unit"] == "ms/step" and rows["ft_ddp join", "plain start"]["unit"] == "s"
