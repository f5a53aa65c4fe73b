"""benchmarks/bench_checkpoint.py: the --quick run completes and reports every case; its checks can fail.

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
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_checkpoint.py"
HAS_LIGHTNING = importlib.util.find_spec("lightning") is not None
HAS_S3 = all(importlib.util.find_spec(name) is not None for name in ("moto", "s3fs"))


@pytest.mark.timeout(120)
def test_quick_run_on_the_local_disk_reports_every_case(tmp_path, positive, run_script):
    out = tmp_path / "checkpoint.json"
    # ~1.5 s in this process: about 20 short fits, a third of them Lightning's
    argv = ["--quick", "--storages", "local", "--json", str(out), "--root-dir", str(tmp_path)]
    status, printed = run_script("bench_checkpoint", *argv)
    assert status == 0, printed[-3000:]
    check_report(json.loads(out.read_text()), printed, ["local"], positive)


@pytest.mark.slow  # ~20 s: about 30 short fits, a third of them Lightning's, a moto server
def test_quick_run_reports_every_case(tmp_path, positive):
    out = tmp_path / "checkpoint.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out), "--root-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    check_report(json.loads(out.read_text()), result.stdout, ["local"] + (["s3"] if HAS_S3 else []), positive)


def check_report(payload: dict, printed: str, storages: list[str], positive) -> None:
    """Every case of every storage in the JSON rows and the printed table, with the samples --quick asks for."""
    assert "| case | variant | value |" in printed
    assert payload["problems"] == []
    arguments = payload["arguments"]
    variants = ["async_save=True", "async_save=False"] + (["Lightning"] if HAS_LIGHTNING else [])
    rows = payload["rows"]
    checkpoints = arguments["saves"] * arguments["repeats"]
    for storage in storages:
        for name in ("stall", "added", "committed after"):
            mine = [row for row in rows if row["case"].startswith(f"{storage},") and row["case"].endswith(name)]
            assert len({row["variant"] for row in mine}) == len(variants), (storage, name, mine)
            for row in mine:
                assert len(row["samples"]) == checkpoints and all(map(math.isfinite, row["samples"])), row
                if name == "committed after":  # a checkpoint is committed after its step ends
                    assert all(value > 0 for value in row["samples"]), row
                if name == "stall":  # a few MB: weights and two AdamW moments
                    assert 0.8 * payload["state_mb"] < row["MB"] < 1.2 * payload["state_mb"] + 0.5, row
    if HAS_LIGHTNING:
        assert payload["lightning_bit_identical"], "Lightning's checkpoints were never compared with tracktrain's"

    resume = {(row["case"].split(":")[0], row["variant"]): row for row in rows if "resume" in row["case"]}
    hows = ["tracktrain from scratch", "tracktrain ckpt_path=<file>", 'tracktrain ckpt_path="last"']
    hows += ["lightning from scratch", "lightning ckpt_path=<file>"] if HAS_LIGHTNING else []
    assert sorted(resume) == sorted((storage, how) for storage in storages for how in hows)
    for (_, how), row in resume.items():
        assert len(row["samples"]) == arguments["resume_repeats"] and all(map(positive, row["samples"])), how
        assert (row["baseline"] is None) == how.endswith("from scratch"), how


def test_checks_catch_incomplete_stray_and_different_checkpoints(tmp_path, load_benchmark):
    """The checks are what makes the script exit 1: a truncated checkpoint, one whose manifest is gone, and
    tensors that differ from the reference are each reported."""
    bench = load_benchmark("bench_checkpoint", "checkpoint_fits", "checkpoint_storage")
    workload = bench.Workload((8, 16, 4), 2, 8, seed=0)
    directory = tmp_path / "checkpoints"
    fit = bench.fit_tracktrain(workload, 5, str(tmp_path), str(directory), 2, async_save=True)
    assert fit.global_step == 5 and len(fit.clock.step_ends) == 5 and len(fit.clock.forward_starts) == 5
    assert len(fit.commits) == 2  # steps 2 and 4, both committed before fit returned
    storage = bench.Storage(bench.LOCAL, str(tmp_path))

    problems: list[str] = []
    loaded = bench.verify_tracktrain_dir(storage, str(directory), [2, 4], "[t]", problems)
    assert problems == [] and sorted(loaded) == [2, 4]
    tensors = bench.checkpoint_tensors(loaded[4][1], bench.TRACKTRAIN)
    assert bench.state_difference(tensors, tensors, exact=True) is None
    changed = {name: value.clone() for name, value in tensors.items()}
    changed["model/net.0.weight"][0, 0] += 1e-3
    assert "model/net.0.weight" in bench.state_difference(changed, tensors, exact=True)
    assert bench.state_difference(changed, tensors, exact=False) is not None  # 1e-3 is far outside rtol=1e-5

    newest = Path(loaded[4][0])
    newest.write_bytes(newest.read_bytes()[:-100])  # truncated after it was committed
    (directory / "checkpoint_2.pt.manifest.json").unlink()  # a checkpoint whose commit never happened
    problems.clear()
    loaded = bench.verify_tracktrain_dir(storage, str(directory), [2, 4], "[t]", problems)
    text = "\n".join(problems)
    assert "checkpoint_4.pt" in text and "truncated" in text
    assert "files that belong to no committed checkpoint: ['checkpoint_2.pt', 'checkpoint_4.pt', " in text
    assert "checkpoints of steps [] were written and load, expected [2, 4]" in text


def test_a_save_sample_is_the_gap_and_window_beyond_the_baseline(load_benchmark):
    """The arithmetic of one sample, on made-up clock readings: steps of 10 s whose gaps are 1 s, except after
    the saving step 2, where the gap is 6 s and the write ends 8 s after the step."""
    bench = load_benchmark("bench_checkpoint", "checkpoint_fits", "checkpoint_storage")
    clock = bench.StepClock(torch.nn.Linear(1, 1))
    moment = 0.0
    for step in range(1, 6):
        clock.forward_starts.append(moment)
        moment += 10.0
        clock.step_ends.append(moment)
        moment += 6.0 if step == 2 else 1.0
    fit = bench.Fit(clock, 5, commits=[("checkpoint_2.pt", clock.step_ends[1] + 8.0)])
    baseline = bench.Baseline(gap=1.0, period=11.0)
    [sample] = bench.save_samples(fit, baseline, [2], every=3)
    assert sample.stall == pytest.approx(5.0)
    assert sample.added == pytest.approx(5.0)  # the window of 3 steps from the end of step 1 to the end of step 4
    assert sample.committed_after == pytest.approx(8.0)
