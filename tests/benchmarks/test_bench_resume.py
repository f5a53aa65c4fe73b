"""benchmarks/bench_resume.py: the --quick run completes and reports every framework at every resume point, and
tracktrain's resume at 90 % loads no sample of the batches it skips; its checks can fail.

No timing is asserted: on a shared machine any ordering of the numbers can happen in a quick run.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

HAS_IGNITE = importlib.util.find_spec("ignite") is not None
HAS_LIGHTNING = importlib.util.find_spec("lightning") is not None
HAS_TORCHDATA = importlib.util.find_spec("torchdata") is not None


@pytest.mark.timeout(120)  # ~3 s: a 100-batch epoch trained to 90 % by each framework, then 16 short resumes
def test_quick_run_reports_every_framework_and_point(tmp_path, positive, run_script):
    out = tmp_path / "resume.json"
    status, printed = run_script("bench_resume", "--quick", "--json", str(out), "--root-dir", str(tmp_path))
    assert status == 0, printed[-3000:]
    assert "## Resume: from the call that resumes to the first training step" in printed
    assert "bench_resume.py --quick" in printed  # the command that produced the table

    payload = json.loads(out.read_text())
    assert payload["problems"] == []
    expected = (
        ["tracktrain"]
        + (["ignite"] if HAS_IGNITE else [])
        + (["lightning"] if HAS_LIGHTNING else [])
        + (["lightning+sdl"] if HAS_LIGHTNING and HAS_TORCHDATA else [])
    )
    assert payload["frameworks"] == expected
    assert positive(payload["batch_load_ms"])
    arguments = payload["arguments"]
    rows = {(row["point_percent"], row["variant"]): row for row in payload["rows"]}
    assert sorted(rows) == sorted((point, key) for point in (0, 10, 50, 90) for key in expected)
    for (point, key), row in rows.items():
        assert len(row["samples"]) == arguments["repeats"] and all(map(positive, row["samples"])), (point, key)
        assert positive(row["value"]) and positive(row["batches"]), (point, key)
        assert row["exact"], (point, key)  # every resumed run's first batch was compared
        assert row["baseline"] == (None if key == "tracktrain" else "tracktrain")
    assert "| case | variant | value |" in printed
    ours = rows[90, "tracktrain"]
    assert ours["exact"] == "yes"
    assert ours["loads"] == [arguments["batch_size"]]  # its first batch only: none of the skipped was loaded


def test_resume_loads_no_skipped_sample_and_the_checks_catch_what_is_not_exact(tmp_path, load_benchmark):
    """In-process, tracktrain alone: the resume at 90 % is exact and loads one batch; the verdicts tell a replayed
    epoch, another order and a wrong step apart; and a resume that loaded skipped samples is a problem."""
    bench_module = load_benchmark("bench_resume", "resume_frameworks")
    workload = bench_module.Workload(batches=20, batch_size=4, sample_us=0, seed=0)
    framework = bench_module.Framework(
        bench_module.TRACKTRAIN, bench_module.run_tracktrain, bench_module.tracktrain_checkpoint
    )
    bench = bench_module.Bench(workload, [framework], str(tmp_path))
    bench.train_references(lambda what: None)
    assert bench.problems == [] and len(framework.reference) == 19

    first = bench.resume_once(framework, 90)
    assert first.step == 18 and first.loads == 4
    assert bench_module.verdict(first, 18, framework.reference) == bench_module.EXACT
    bench.check(framework, 90, first)
    assert bench.problems == []

    FirstStep = bench_module.FirstStep
    replayed = FirstStep(0.01, 18, framework.reference[0], 4)
    assert bench_module.verdict(replayed, 18, framework.reference) == bench_module.REPLAYED
    other = FirstStep(0.01, 18, [-1, -2, -3, -4], 4)
    assert bench_module.verdict(other, 18, framework.reference) == bench_module.OTHER
    assert (
        bench_module.verdict(FirstStep(0.01, 0, framework.reference[18], 4), 18, framework.reference)
        == bench_module.WRONG_STEP
    )
    bench.check(framework, 90, FirstStep(0.01, 18, framework.reference[18], 76))
    bench.check(framework, 90, replayed)
    text = "\n".join(bench.problems)
    assert "76 samples were loaded before the first step, expected one batch (4)" in text
    assert "epoch replayed from its 1st batch" in text
