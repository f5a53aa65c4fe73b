"""benchmarks/bench_trainer_overhead.py: the --quick run completes and reports every row; its checks can fail.

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

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_trainer_overhead.py"
HAS_LIGHTNING = importlib.util.find_spec("lightning") is not None


@pytest.mark.slow  # ~15 s: about 70 short fits, a third of them Lightning's
def test_quick_run_reports_every_row_with_positive_times(tmp_path, positive):
    out = tmp_path / "trainer.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "## Time per iteration, start-up excluded" in result.stdout
    assert "## Start-up: from the Trainer's construction to the first forward" in result.stdout

    payload = json.loads(out.read_text())
    assert payload["problems"] == []
    results = {case["key"]: case for case in payload["results"]}
    assert sorted(results) == ["medium", "tiny"]
    libraries = ["raw", "tracktrain"] + (["lightning"] if HAS_LIGHTNING else [])
    for key, case in results.items():
        assert case["long_epochs"] > case["short_epochs"] == 1
        assert case["measured_iterations"] == (case["long_epochs"] - 1) * case["batches_per_epoch"] > 0
        assert [row["mode"] for row in case["rows"]] == ["off", "defaults"]
        for row in case["rows"]:
            where = f"{key} {row['mode']}"
            for library in libraries:
                assert positive(row["us_per_iter"][library]), (where, library, row)
                assert positive(row["startup_ms"][library]), (where, library, row)
                assert positive(row["warmup_startup_ms"][library]), (where, library, row)
            for library in libraries[1:]:
                overhead = row["overhead_us_per_iter"][library]
                assert math.isclose(overhead, row["us_per_iter"][library] - row["us_per_iter"]["raw"]), where
            assert row["noise_us_per_iter"] >= 0
            if HAS_LIGHTNING:
                assert row["goal_met"].split()[0] in ("yes", "NO"), row
            else:
                assert row["us_per_iter"]["lightning"] is None and row["goal_met"] == "n/a"
        # every timed fit left its samples: one per repeat, two start-ups per repeat (short and long fit)
        for name, samples in case["samples_us_per_iter"].items():
            assert len(samples) == payload["arguments"]["repeats"] == 3, name
            assert len(case["samples_startup_s"][name]) == 6, name
        if HAS_LIGHTNING:
            assert case["loggers"], "Lightning's defaults should have a logger"


def test_sanity_checks_catch_a_fit_that_differs_from_the_raw_loop(tmp_path, load_benchmark):
    """The checks are what makes the script exit 1: a fit that skips batches, or trains differently, or writes
    files with everything off, or saves no checkpoint with the defaults, is reported."""
    bench = load_benchmark("bench_trainer_overhead", "workloads")
    workload = bench.Workload((4, 8, 3), 4, 5, seed=0)
    case = bench.Case("small", "small", workload, 1, 2)
    case.reference[1] = bench.weights(bench.fit_raw(workload, 1, "", None).net)

    def short_fit(workload, epochs, run_dir, sink):  # one batch fewer, and a stray file
        run = bench.fit_raw(workload, epochs, run_dir, sink)
        (Path(run_dir) / "stray.txt").write_text("x")
        return bench.Run(run.seconds, run.startup_s, run.iterations - 1, bench.make_mlp((4, 8, 3)))

    problems: list[str] = []
    root = str(tmp_path)
    bad_off = bench.Variant("bad-off", "bad", "off", short_fit, writes_nothing=True)
    bad_defaults = bench.Variant("bad-defaults", "bad", "defaults", short_fit, saves_checkpoints=True)
    for variant in (bad_off, bad_defaults):
        bench.run_once(case, variant, 1, root, 1, None, problems)
    text = "\n".join(problems)
    assert "bad-off (1 epochs): ran 4 iterations, expected 5" in text
    assert "bad-off (1 epochs): the trained weights differ from the hand-written loop's" in text
    assert "wrote files with checkpointing and logging off: ['stray.txt']" in text
    assert "bad-defaults (1 epochs): saved no checkpoint" in text

    problems.clear()
    good = bench.Variant("tracktrain-off", "tracktrain", "off", bench.tracktrain_fitter("off"), writes_nothing=True)
    bench.run_once(case, good, 1, root, 1, None, problems)
    assert problems == []
