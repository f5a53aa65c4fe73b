"""benchmarks/bench_trainer_overhead.py: the --quick run reports every variant in the harness's rows and table; its
checks can fail. No timing is asserted."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_trainer_overhead.py"
HAS_LIGHTNING = importlib.util.find_spec("lightning") is not None


@pytest.mark.slow  # ~15 s: about 70 short fits, a third of them Lightning's
def test_quick_run_reports_every_row(tmp_path, positive):
    out = tmp_path / "trainer.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "| case | variant | value |" in result.stdout
    payload = json.loads(out.read_text())
    assert payload["problems"] == []
    rows = {(row["case"], row["variant"], row["baseline"]): row for row in payload["rows"]}
    libraries = ["tracktrain"] + (["lightning"] if HAS_LIGHTNING else [])
    for key in ("tiny", "medium"):
        for mode in ("off", "defaults"):
            for library in libraries:
                row = rows[(f"{key} {mode}", f"{library}-{mode}", "raw")]
                assert row["unit"] == "µs/it" and len(row["samples"]) == 3, row
                assert positive(row["samples"][0]) or row["samples"][0] <= 0  # a number; a quick run may be noise
                start = rows[(f"{key} start-up", f"{library}-{mode}", "raw")]
                assert len(start["samples"]) == 6 and all(positive(ms) for ms in start["samples"])
                assert positive(start["warmup_fit_ms"])
            ours = rows[(f"{key} {mode}", f"tracktrain-{mode}", "raw")]
            if HAS_LIGHTNING:
                assert ours["goal"].split(": ")[-1].split()[0] in ("yes", "NO"), ours
                assert (f"{key} {mode}", f"tracktrain-{mode}", f"lightning-{mode}") in rows
            else:
                assert ours["goal"] is None


def test_sanity_checks_catch_a_fit_that_differs_from_the_raw_loop(tmp_path, load_benchmark):
    """The checks make the script exit 1: a fit that skips batches, trains differently, writes files with
    everything off, or saves no checkpoint with the defaults, is reported."""
    bench = load_benchmark("bench_trainer_overhead", "workloads")
    workload = bench.ClassifierData((4, 8, 3), 4, 5, seed=0)
    reference = bench.weights(bench.fit_raw(workload, 1, "", None).net)
    args = type("Args", (), {"root": str(tmp_path), "threads": 1})

    def short_fit(workload, epochs, run_dir, sink):  # one batch fewer, and a stray file
        run = bench.fit_raw(workload, epochs, run_dir, sink)
        (Path(run_dir) / "stray.txt").write_text("x")
        return bench.Run(run.seconds, run.startup_s, run.iterations - 1, bench.make_mlp((4, 8, 3)))

    problems: list[str] = []
    for variant in (bench.Variant("bad-off", "off", short_fit), bench.Variant("bad-defaults", "defaults", short_fit)):
        bench.run_once(workload, variant, 1, reference, args, None, problems)
    text = "\n".join(problems)
    assert "bad-off (1 epochs): ran 4 iterations, expected 5" in text
    assert "bad-off (1 epochs): the trained weights differ from the hand-written loop's" in text
    assert "wrote files with checkpointing and logging off: ['stray.txt']" in text
    assert "bad-defaults (1 epochs): saved no checkpoint" in text

    problems.clear()
    good = bench.Variant("tracktrain-off", "off", bench.tracktrain_fitter("off"))
    bench.run_once(workload, good, 1, reference, args, None, problems)
    assert problems == []
