"""benchmarks/bench_save_last.py: the --quick run reports each checkpoint callback's stall in the harness's rows and
table, and writes the checkpoints expected."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_save_last.py"


@pytest.mark.slow  # 5-11 s: 3 fits, one of them Lightning's (the default run takes only tests of ≤ 3 s)
@pytest.mark.timeout(120)
def test_quick_run_reports_every_callback(tmp_path, positive):
    out = tmp_path / "save_last.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    payload = json.loads(out.read_text())
    assert payload["problems"] == []
    rows = {row["variant"]: row for row in payload["rows"]}
    assert {"tracktrain async, save_top_k=1", "tracktrain async, save_top_k=1 + save_last=True"} <= set(rows)
    for row in rows.values():
        assert row["unit"] == "ms stall/save" and all(positive(sample) for sample in row["samples"])
    assert "| case | variant | value |" in result.stdout
