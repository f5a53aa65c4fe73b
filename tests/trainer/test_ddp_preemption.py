"""Pre-emption under DDP: a signal sent to one rank stops every rank at the same step, rank 0 saves that step,
and the same torchrun command resumes both ranks from it."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

from tests import _processes

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

SCRIPT = Path(__file__).with_name("_ddp_preempt_script.py")


def torchrun(root: Path) -> _processes.Command:
    """The 2-rank fit under torchrun, its output read as it comes; a deadline missed prints every rank's stack."""
    return _processes.Command(_processes.torchrun(SCRIPT, root))


def records(root: Path, rank: int) -> list[dict]:
    return [json.loads(line) for line in (root / f"rank{rank}.jsonl").read_text().splitlines()]


def rank_one_step(line: str) -> int:
    """The step rank 1 reports in `line` (the ranks print at once: their lines may share one line of the pipe)."""
    return max((int(step) for step in re.findall(r"rank 1 pid \d+ step (\d+)", line)), default=-1)


def test_a_signal_on_one_rank_stops_both_at_the_same_step_and_both_resume(tmp_path):
    reference = tmp_path / "reference"
    reference.mkdir()
    with torchrun(reference) as run:
        assert run.wait(timeout=180) == 0, run.tails()

    root = tmp_path / "run"
    root.mkdir()
    with torchrun(root) as run:
        # wait until rank 1 is a few steps in, then pre-empt it alone
        line = run.wait_for(lambda line: rank_one_step(line) >= 5, timeout=120)
        assert line is not None, f"rank 1 never reported step 5: {run.tails()}"
        pid = int(re.findall(r"rank 1 pid (\d+) step", line)[-1])
        assert run.ranks()[1] == pid
        os.kill(pid, signal.SIGUSR1)
        run.wait(timeout=120)
    stopped = [records(root, rank)[-1] for rank in range(2)]
    assert [record["what"] for record in stopped] == ["Terminated", "Terminated"], stopped
    step = stopped[0]["step"]
    assert stopped[1]["step"] == step and step >= 5  # the same step on both ranks
    # rank 0 committed the checkpoint of exactly that step (rank 1 never writes)
    assert (root / "checkpoints" / f"last_checkpoint_{step}.pt.manifest.json").is_file()

    with torchrun(root) as run:
        assert run.wait(timeout=180) == 0, run.tails()
    finished = [records(root, rank)[-1] for rank in range(2)]
    assert [record["what"] for record in finished] == ["finished", "finished"]
    assert all(record["ckpt_path"].endswith(f"last_checkpoint_{step}.pt") for record in finished)
    expected = records(reference, 0)[-1]["weights"]
    assert finished[0]["weights"] == finished[1]["weights"] == expected
