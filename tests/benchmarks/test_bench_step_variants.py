"""benchmarks/bench_step_variants.py: the --quick run completes and reports every variant with consistent JSON rows;
its sanity checks and its verdicts can fail.

No timing is asserted: on a shared machine any ordering of the numbers can happen in a quick run.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_step_variants.py"
VARIANTS = ["fp32", "bf16", "fp16", "ddp"]


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("bench_step_variants", "step_fits", "workloads")


@pytest.mark.slow  # ~20 s: 24 short fits in this process, then 10 in each of 2 DDP processes
@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_quick_run_reports_every_variant_with_consistent_rows(tmp_path, positive):
    out = tmp_path / "variants.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=230,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "## Time per optimizer step, start-up and first epoch excluded" in result.stdout
    assert "Goal (the Trainer's overhead ≤ 5 % of the hand-written step): met in" in result.stdout

    payload = json.loads(out.read_text())
    assert payload["problems"] == []
    assert payload["goal_percent"] == 5.0
    rows = {row["key"]: row for row in payload["rows"]}
    assert list(rows) == VARIANTS
    arguments = payload["arguments"]
    for key, row in rows.items():
        medians = row["us_per_step"]
        assert positive(medians["raw"]) and positive(medians["tracktrain"]), (key, row)
        assert math.isclose(row["overhead_us"], medians["tracktrain"] - medians["raw"]), key
        assert math.isclose(row["overhead_percent"], row["overhead_us"] / medians["raw"] * 100), key
        assert row["noise_us"] == max(row["iqr_us"].values()) >= 0, key
        # the verdict follows from the numbers: ≤ 5 % of the raw step, "(within noise)" when the margin is small
        margin = 0.05 * medians["raw"] - row["overhead_us"]
        assert row["goal_met"].split()[0] == ("yes" if margin >= 0 else "NO"), (key, row)
        assert row["goal_met"].endswith("(within noise)") == (abs(margin) <= row["noise_us"]), (key, row)
        # a sample is one fit, timed from its second epoch on
        assert row["timed_steps"] == (row["epochs"] - 1) * row["batches_per_epoch"] > 0, key
        expected_samples = arguments["ddp_repeats" if key == "ddp" else "repeats"]
        for variant in ("raw", "tracktrain"):
            samples = row["samples_us_per_step"][variant]
            assert len(samples) == expected_samples and all(positive(sample) for sample in samples), (key, variant)
    # one thread, the same kernels in the same order: the Trainer lands exactly where the hand-written loop does
    assert rows["fp32"]["max_weight_diff"]["tracktrain"] == 0.0
    assert rows["ddp"]["max_weight_diff"]["tracktrain"] == 0.0
    for key in ("bf16", "fp16"):
        assert rows[key]["max_weight_diff"]["tracktrain"] <= rows[key]["tolerance"]["atol"] * 10, key
    assert rows["fp16"]["batches_per_epoch"] < rows["fp32"]["batches_per_epoch"]  # its CPU step is ~10 × slower
    assert rows["ddp"]["batches_per_epoch"] == 10  # --quick: 20 batches, half on each rank
    assert rows["ddp"]["max_weight_diff"]["raw"] == 0.0 and positive(rows["ddp"]["launch_seconds"])


def test_sanity_checks_catch_a_fit_that_differs_from_the_raw_loop(bench, tmp_path):
    """The checks are what makes the script exit 1: a fit that skips a batch, trains elsewhere, loses the logged
    loss or ends with another GradScaler scale is reported; the real Trainer fit is not."""
    case = bench.Case(bench.PRECISIONS["fp16"], bench.medium_data(2, seed=0), 2)
    problems: list[str] = []
    bench.run_fit(case, "raw", str(tmp_path), 1, problems)  # the first fit of a case is the reference
    scale = case.reference.scale
    assert problems == [] and isinstance(scale, float)

    good = bench.run_fit(case, "tracktrain", str(tmp_path), 1, problems)
    assert problems == []
    assert good.steps == 4 and good.timed_steps == 2  # the first epoch is not timed
    assert case.max_weight_diff == {"raw": 0.0, "tracktrain": 0.0}

    other = bench.medium_data(2, seed=1)  # other initial weights
    bad = bench.Fit(good.seconds, 1, 3, other.fresh_net(), logged_loss=False, scale=scale / 2)
    bench.check_fit(case, "bad", bad, problems)
    text = "\n".join(problems)
    assert "[fp16] bad: took 3 optimizer steps (1 timed), expected 4 (2 timed)" in text
    assert "[fp16] bad: the trained weights differ from the hand-written loop's" in text
    assert "[fp16] bad: the module's self.log('loss', ...) is not in the trainer's callback_metrics" in text
    assert f"[fp16] bad: the GradScaler ended at scale {scale / 2}, the hand-written loop's at {scale}" in text
    assert case.max_weight_diff["bad"] > 0


def test_the_raw_loop_and_the_trainer_time_the_same_span(bench, tmp_path):
    """Both clocks start at the second epoch and stop at the end of the run: the same steps are timed, within
    the fit, and both end on the same weights."""
    workload = bench.medium_data(3, seed=0)
    precision = bench.PRECISIONS["bf16"]
    fits, walls = [], []
    for fitter in (bench.fit_raw, bench.fit_tracktrain):
        started = time.perf_counter()
        fits.append(fitter(workload, precision, 3, str(tmp_path)))
        walls.append(time.perf_counter() - started)
    for fit, wall in zip(fits, walls):
        assert fit.steps == 9 and fit.timed_steps == 6
        assert 0 < fit.seconds < wall  # a clock that never started would count from perf_counter's zero
    raw, ours = fits
    assert bench.max_difference(bench.weights(raw.net), bench.weights(ours.net)) == 0.0
    assert not bench.weights_match(bench.weights(raw.net), bench.weights(workload.fresh_net()), 1e-5, 1e-7)


def test_verdicts_follow_the_overhead_and_the_noise(bench):
    steady = [1000.0] * 5
    cheap = bench.summarize({"raw": steady, "tracktrain": [1030.0] * 5}, "median")
    assert cheap["overhead_us"] == 30 and cheap["overhead_percent"] == 3 and cheap["goal_met"] == "yes"
    costly = bench.summarize({"raw": steady, "tracktrain": [1100.0] * 5}, "median")
    assert costly["goal_met"] == "NO"
    # an interquartile range of 100 µs hides a margin of 20 µs
    noisy = bench.summarize(
        {"raw": [900.0, 950, 1000, 1050, 1100], "tracktrain": [970.0, 1020, 1070, 1120, 1170]}, "median"
    )
    assert noisy["overhead_us"] == 70 and noisy["noise_us"] == 100 and noisy["goal_met"] == "NO (within noise)"
    # paired: the difference within each round, whose drift the two variants share
    drifting = bench.summarize({"raw": [1000.0, 1200, 900], "tracktrain": [1010.0, 1210, 1300]}, "median")
    assert drifting["paired_overhead_us"] == 10 and drifting["overhead_us"] == 210
    assert bench.summarize({"raw": steady, "tracktrain": [1100.0] * 5}, "min")["us_per_step"]["tracktrain"] == 1100


def test_each_rank_reads_its_share_of_the_batches(bench):
    config = bench.DDPConfig(50, 5, 3, 0, 1, 0, "", "")
    assert config.steps_per_epoch == 25 and config.timed_steps == 100
    assert bench.DDPConfig(21, 2, 1, 0, 1, 0, "", "").steps_per_epoch == 11  # 1344 samples, 672 per rank: 11 batches
