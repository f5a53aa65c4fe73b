"""Pre-emption under DDP: a signal sent to one rank stops every rank at the same step, rank 0 saves that step,
and the same torchrun command resumes both ranks from it."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

SCRIPT = Path(__file__).with_name("_ddp_preempt_script.py")


def torchrun(root: Path) -> subprocess.Popen:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    launcher = Path(sys.executable).with_name("torchrun")
    command = [str(launcher) if launcher.exists() else shutil.which("torchrun"), "--nnodes", "1",
               "--nproc_per_node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
               str(SCRIPT), str(root)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def records(root: Path, rank: int) -> list[dict]:
    return [json.loads(line) for line in (root / f"rank{rank}.jsonl").read_text().splitlines()]


def test_a_signal_on_one_rank_stops_both_at_the_same_step_and_both_resume(tmp_path):
    reference = tmp_path / "reference"
    reference.mkdir()
    assert torchrun(reference).wait(timeout=180) == 0

    root = tmp_path / "run"
    root.mkdir()
    run = torchrun(root)
    try:
        pid = None
        for line in run.stdout:  # wait until rank 1 is a few steps in, then pre-empt it alone
            # the ranks print at once: their lines may share one line of the pipe
            reached = re.search(r"rank 1 pid (\d+) step (\d+)", line)
            if reached and int(reached.group(2)) >= 5:
                pid = int(reached.group(1))
                break
        assert pid is not None, f"rank 1 never reported step 5: {run.stderr.read()[-3000:]}"
        os.kill(pid, signal.SIGUSR1)
        run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    stopped = [records(root, rank)[-1] for rank in range(2)]
    assert [record["what"] for record in stopped] == ["Terminated", "Terminated"], stopped
    step = stopped[0]["step"]
    assert stopped[1]["step"] == step and step >= 5  # the same step on both ranks
    # rank 0 committed the checkpoint of exactly that step (rank 1 never writes)
    assert (root / "checkpoints" / f"last_checkpoint_{step}.pt.manifest.json").is_file()

    assert torchrun(root).wait(timeout=180) == 0
    finished = [records(root, rank)[-1] for rank in range(2)]
    assert [record["what"] for record in finished] == ["finished", "finished"]
    assert all(record["ckpt_path"].endswith(f"last_checkpoint_{step}.pt") for record in finished)
    expected = records(reference, 0)[-1]["weights"]
    assert finished[0]["weights"] == finished[1]["weights"] == expected
