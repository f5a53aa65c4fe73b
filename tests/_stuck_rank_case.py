"""Deliberately stuck ranks, for tests/test_processes.py, which runs this file in a pytest of its own (the name has
no test_ prefix: the suite never collects it). Each test FAILS, as a hang in a real test would, and must fail in
seconds with both ranks' stacks in its report and no process left behind.

Two gloo ranks: rank 0 waits in a barrier (the collective timeout is 60 s, longer than any deadline here), rank 1
never enters it. Each rank writes its pid to STUCK_RANK_OUT, and says it is stuck, before it blocks; the deadline
(pytest-timeout's, or a Command's) starts counting once both are, so that the stacks show where they hang rather
than an import on a loaded machine."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

if __name__ == "__main__":  # a torchrun rank: the repository's root on the path, as pytest puts it
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import _processes  # noqa: E402

OUT = Path(os.environ.get("STUCK_RANK_OUT", "."))
DEADLINE = 2.0  # seconds, once both ranks are stuck


def _wait_in_a_barrier() -> None:
    import torch.distributed as dist

    dist.barrier()  # rank 1 never comes


def _sleep_forever() -> None:
    time.sleep(3600)


def stuck_rank() -> None:
    """One rank (tracktrain.distributed.spawn's, or torchrun's when this file is run as a script)."""
    import torch.distributed as dist

    from tracktrain.distributed.collectives import init_from_env

    init_from_env()
    rank = dist.get_rank()
    (OUT / f"rank{rank}-{os.getpid()}.pid").write_text(str(os.getpid()))
    print(f"rank {rank} stuck", flush=True)
    _wait_in_a_barrier() if rank == 0 else _sleep_forever()


def _both_ranks_stuck(count: int = 2) -> bool:
    return len(list(OUT.glob("rank*.pid"))) >= count


def _cut_pytest_timeout_short_once_stuck(pids_before: int) -> None:
    """pytest-timeout's own alarm, brought forward to DEADLINE seconds after both ranks are stuck (a thread may
    move the process's timer; the handler that fires is still pytest-timeout's)."""

    def watch() -> None:
        while not _both_ranks_stuck(pids_before + 2):
            time.sleep(0.05)
        signal.setitimer(signal.ITIMER_REAL, DEADLINE)

    threading.Thread(target=watch, daemon=True).start()


@pytest.mark.timeout(120, func_only=True)
def test_spawned_ranks_under_pytest_timeout():
    """tracktrain.distributed.spawn blocks until pytest-timeout fails the test; conftest's report hook prints
    each rank's stack (written to the test's captured stderr) and kills them."""
    from tracktrain.distributed.collectives import spawn

    _cut_pytest_timeout_short_once_stuck(len(list(OUT.glob("rank*.pid"))))
    spawn(stuck_rank, 2)


def wait_until_both_are_stuck(command: _processes.Command) -> None:
    stuck = set()

    def both(line: str) -> bool:
        stuck.update(word for word in ("rank 0 stuck", "rank 1 stuck") if word in line)
        return len(stuck) == 2

    assert command.wait_for(both, timeout=120), command.tails()


def test_torchrun_ranks_past_a_commands_deadline():
    """Command.wait's own deadline: ProcessHang, with the stacks of torchrun and both ranks, read from its pipes."""
    with _processes.Command(_processes.torchrun(__file__)) as command:
        wait_until_both_are_stuck(command)
        command.wait(timeout=DEADLINE)


@pytest.mark.timeout(120, func_only=True)
def test_torchrun_ranks_under_pytest_timeout():
    """A Command waited for longer than pytest-timeout allows: the report hook stops its processes, whose stacks
    come through its pipes."""
    command = _processes.Command(_processes.torchrun(__file__))
    wait_until_both_are_stuck(command)
    signal.setitimer(signal.ITIMER_REAL, DEADLINE)  # pytest-timeout's alarm, brought forward
    command.wait(timeout=600)


if __name__ == "__main__":
    stuck_rank()
