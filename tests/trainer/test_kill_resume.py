"""Kill a training process at random moments (SIGKILL mid-epoch, mid-save, mid-upload; SIGTERM), start the same
command again, and finish with parameters bit-identical to a run that was never interrupted: on local disk and on
S3 (moto's server through s3fs)."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest
import torch

from tests.trainer._resume_run import STEPS, Run


def reference_parameters(
    tmp_path: Path, data: str | int, seed: int | None = None, ranks: int = 1
) -> dict[str, torch.Tensor]:
    run = Run(str(tmp_path / "reference"), tmp_path / "reference.pt", data, seed, ranks)
    assert run.finish() == 0, run.stderr[-3000:]
    return torch.load(tmp_path / "reference.pt", weights_only=True)


def kill_and_resume(root: str, tmp_path: Path, data: str | int, seed: int, ranks: int = 1) -> None:
    """Kill the script 3 times at random moments, then let it finish: its parameters must be those of a run that
    was never interrupted (with the seed the first start used: drawn by the Trainer for "noseed"), on every rank."""
    rng = random.Random(seed)
    out = tmp_path / "resumed.pt"
    resumed_steps = []
    run_seeds = set()
    for _attempt in range(3):
        run = Run(root, out, data, ranks=ranks)
        # mid-epoch, or right after a save began: the background write (or S3 upload) is then under way
        target = rng.choice(["step", "saving"])
        after = rng.randint(2, 12)
        seen = 0

        def reached(line: str) -> bool:
            nonlocal seen
            seen += line.startswith(target + " ")
            return seen >= after

        if run.read_until(reached) is None:
            final = run  # it finished before the chosen moment (a later start would find the run finished)
            break
        time.sleep(rng.uniform(0.0, 0.03))
        run.kill()
        run.finish()
        path, step = run.resumed_from()
        resumed_steps.append(step)
        run_seeds.add(run.run_seed)
    else:
        final = Run(root, out, data, ranks=ranks)
    assert final.finish() == 0, final.stderr[-3000:]
    path, step = final.resumed_from()
    run_seeds.add(final.run_seed)
    assert len(run_seeds) == 1  # every start continued the first one's data order
    expected = reference_parameters(tmp_path, data, run_seeds.pop(), ranks)
    assert step > 0 and path.endswith(".pt"), final.lines[:3]  # it did resume
    assert resumed_steps == sorted(resumed_steps)  # never went back to an older checkpoint
    assert final.lines[-1] == f"done {STEPS // ranks}"
    for rank in range(ranks):
        actual = torch.load(out if rank == 0 else f"{out}.rank{rank}", weights_only=True)
        assert actual.keys() == expected.keys()
        for name in expected:
            assert torch.equal(actual[name], expected[name]), (rank, name)


@pytest.mark.slow
@pytest.mark.parametrize("data", [0, 2, "noseed", "iterable", "torchdata"])
def test_sigkill_at_random_moments_on_local_disk(tmp_path, data):
    """With the Trainer's defaults: a shuffling DataLoader (with and without workers, with and without a seed), an
    IterableDataset that keeps its own position, and torchdata's StatefulDataLoader."""
    if data == "torchdata":
        pytest.importorskip("torchdata.stateful_dataloader")  # not in the XLA environment (scripts/test-xla.sh)
    kill_and_resume(str(tmp_path / "run"), tmp_path, data, seed=len(str(data)))
    # whatever was cut short is never loaded, and never left under a checkpoint's name
    names = os.listdir(tmp_path / "run" / "checkpoints")
    for name in names:
        if name.endswith(".pt"):
            assert f"{name}.manifest.json" in names
    assert not [name for name in names if name.endswith(".tmp")]  # swept at each start


@pytest.mark.slow
@pytest.mark.distributed
def test_sigkill_of_a_ddp_run_under_torchrun_resumes_every_rank_bit_identical(tmp_path):
    """2 gloo ranks, dropout in the model (each rank's generators matter), a shuffling DistributedSampler."""
    kill_and_resume(str(tmp_path / "run"), tmp_path, 0, seed=5, ranks=2)


@pytest.mark.slow
def test_sigkill_at_random_moments_on_s3(tmp_path, s3_bucket):
    kill_and_resume(f"{s3_bucket}/runs/exp", tmp_path, 0, seed=11)


@pytest.mark.parametrize("signum", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)])
def test_sigterm_or_ctrl_c_saves_a_checkpoint_says_so_in_one_line_and_the_run_continues(tmp_path, signum):
    root = tmp_path / "run"
    run = Run(str(root), tmp_path / "out.pt", 0)
    line = run.read_until(lambda line: line == "step 7")
    assert line == "step 7"
    run.process.send_signal(signum)
    assert run.finish() == 128 + signum, run.stderr[-3000:]  # 143 for SIGTERM, 130 for Ctrl-C
    assert "Traceback" not in run.stderr
    # the step in flight finished, then a checkpoint of exactly that point was committed
    last_step = max(int(line.split()[1]) for line in run.lines if line.startswith("step "))
    checkpoint = root / "checkpoints" / f"last_checkpoint_{last_step}.pt"
    assert (root / "checkpoints" / f"last_checkpoint_{last_step}.pt.manifest.json").is_file()
    said = [line for line in run.stderr.splitlines() if "Stopped by" in line]
    assert len(said) == 1, run.stderr[-3000:]
    assert (
        f"Stopped by {signal.Signals(signum).name} after step {last_step}; {checkpoint} holds it: run the same "
        "command again to resume."
    ) in said[0]
    assert (root / "lightning_logs" / "version_0" / "status.txt").read_text().strip() == "KILLED"

    again = Run(str(root), tmp_path / "out.pt", 0)
    assert again.finish() == 0, again.stderr[-3000:]
    assert again.resumed_from() == (str(root / "checkpoints" / f"last_checkpoint_{last_step}.pt"), last_step)
    expected = reference_parameters(tmp_path, 0)
    actual = torch.load(tmp_path / "out.pt", weights_only=True)
    assert all(torch.equal(actual[name], expected[name]) for name in expected)
