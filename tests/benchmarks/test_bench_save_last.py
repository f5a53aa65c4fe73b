"""benchmarks/bench_save_last.py: the --quick run reports each checkpoint callback's stall in the harness's rows and
table, and writes the checkpoints expected."""

from __future__ import annotations

import json

import pytest


@pytest.mark.timeout(120)
def test_quick_run_reports_every_callback(tmp_path, positive, run_script):
    out = tmp_path / "save_last.json"
    status, printed = run_script("bench_save_last", "--quick", "--json", str(out))  # ~1 s: 3 fits of 10 steps
    assert status == 0, printed[-3000:]
    payload = json.loads(out.read_text())
    assert payload["problems"] == []
    rows = {row["variant"]: row for row in payload["rows"]}
    assert {"tracktrain async, save_top_k=1", "tracktrain async, save_top_k=1 + save_last=True"} <= set(rows)
    for row in rows.values():
        assert row["unit"] == "ms stall/save" and all(positive(sample) for sample in row["samples"])
    assert "| case | variant | value |" in printed
