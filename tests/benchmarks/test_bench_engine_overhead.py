"""benchmarks/bench_engine_overhead.py: the --quick run reports every case in the harness's rows and table, with
the goal columns on tracktrain's rows. No timing is asserted."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_engine_overhead.py"
HAS_IGNITE = importlib.util.find_spec("ignite") is not None


@pytest.mark.slow  # ~15 s: 7 cases of 3 rounds, Lightning's fits among them
@pytest.mark.timeout(300)
def test_quick_run_reports_every_case(tmp_path, positive):
    out = tmp_path / "engine.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "| case | variant | value |" in result.stdout
    payload = json.loads(out.read_text())
    assert payload["problems"] == []
    rows = payload["rows"]
    cases = {row["case"].split()[0] for row in rows}
    assert {
        "tiny-step",
        "tiny-supervised",
        "tiny-handlers",
        "tiny-metrics",
        "tiny-pbar",
        "noop",
        "noop-handlers",
    } == cases
    for row in rows:
        assert row["unit"] == "µs/it" and len(row["samples"]) == 3 and all(map(positive, row["samples"])), row
    if HAS_IGNITE:
        goals = {(row["case"].split()[0], row["variant"]) for row in rows if row["goal"]}
        assert ("tiny-step", "tracktrain") in goals and ("tiny-metrics", "tracktrain+metrics") in goals
        assert ("tiny-pbar", "tracktrain+pbar") in goals
