"""A rank lost mid-fit (SIGKILL: what the OOM killer or a dead node does) is named on every survivor in one line
before its error, with what to do: the backends say only "Connection closed by peer [address]"."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import _processes

pytestmark = pytest.mark.distributed

SCRIPT = Path(__file__).with_name("_lose_rank_script.py")


def test_a_survivor_names_the_lost_rank_and_what_to_do(tmp_path):
    result = _processes.run(_processes.torchrun(SCRIPT, tmp_path), timeout=120)
    assert result.returncode != 0
    lost_pid = re.search(r"rank 1 is pid (\d+)", result.stdout + result.stderr)
    assert lost_pid, result.stderr[-3000:]
    said = [line for line in result.stderr.splitlines() if "ERROR tracktrain [rank 0]" in line]
    assert said, result.stderr[-3000:]
    assert f"Rank 0 lost rank 1 (pid {lost_pid.group(1)}) on " in said[0]
    assert "its process is gone" in said[0] and 'Trainer(resume="auto")' in said[0]
