"""No test waits for a hang, and none leaves a process behind (tests/_processes.py, tests/conftest.py): a stuck rank
fails its test in seconds with every rank's Python stack in the report; whatever a test started is killed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import _processes

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds processes through /proc")

CASES = Path(__file__).with_name("_stuck_rank_case.py")


@pytest.mark.distributed
@pytest.mark.slow  # three stuck runs in a pytest of their own (~16 s); CI's slow run keeps it
@pytest.mark.timeout(240)
def test_a_stuck_rank_fails_its_test_in_seconds_with_every_ranks_stack_and_leaves_no_process(tmp_path):
    """tests/_stuck_rank_case.py in a pytest of its own: two gloo ranks, rank 0 in a barrier rank 1 never enters,
    started by tracktrain.distributed.spawn and by torchrun, failed by pytest-timeout or by a Command's deadline
    (2 s once both are stuck; the collective timeout is 60 s). Each test fails well within a minute, its report
    holds both ranks' stacks (and torchrun's), and no process is left: not a rank, not the inner pytest waiting
    for one at its exit, not a core file."""
    started = time.monotonic()
    command = _processes.Command(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--durations=0", str(CASES)],
        cwd=tmp_path,
        env={**os.environ, "STUCK_RANK_OUT": str(tmp_path)},
    )
    status = command.wait(timeout=180)
    seconds = time.monotonic() - started
    output = command.stdout + command.stderr
    assert status == 1 and "3 failed" in output, output[-5000:]

    reports = dict(re.findall(r"_{3,} (test_\w+) _{3,}\n(.*?)(?=\n_{3,} test_|\n={3,} slowest)", output, re.S))
    assert set(reports) == {
        "test_spawned_ranks_under_pytest_timeout",
        "test_torchrun_ranks_past_a_commands_deadline",
        "test_torchrun_ranks_under_pytest_timeout",
    }, output[-5000:]
    for name, report in reports.items():
        # both ranks' stacks, where each one waits: rank 0 in the barrier, rank 1 away from it
        assert report.count("Fatal Python error: Aborted") >= 2, (name, report[-5000:])
        assert re.search(r"in barrier\n.*\n.*in _wait_in_a_barrier\n", report), (name, report[-5000:])
        assert "in _sleep_forever\n" in report, (name, report[-5000:])
        if "torchrun" in name:  # named by rank, and the launcher's own stack too
            assert "(RANK 0)" in report and "(RANK 1)" in report, (name, report[-5000:])
            assert "torch/distributed/run.py" in report, (name, report[-5000:])
    assert "Timeout" in reports["test_spawned_ranks_under_pytest_timeout"]
    assert "ProcessHang" in reports["test_torchrun_ranks_past_a_commands_deadline"]

    durations = {
        name: float(value) for value, name in re.findall(r"([\d.]+)s call +tests/_stuck_rank_case.py::(\w+)", output)
    }
    assert len(durations) == 3 and max(durations.values()) < 60, durations

    # nothing left: every rank's pid is gone, and no process carries the inner pytest's marker
    ranks = [int(path.read_text()) for path in tmp_path.glob("rank*.pid")]
    assert len(ranks) == 6, ranks
    assert not [pid for pid in ranks if _processes.alive(pid)], [_processes.describe(pid) for pid in ranks]
    assert not command.members(), [_processes.describe(pid) for pid in command.members()]
    assert not list(tmp_path.glob("core*"))
    print(f"inner pytest: {seconds:.1f} s; each stuck test's call: {durations}")


def test_a_chatty_command_never_blocks_on_its_pipes():
    """Megabytes on stdout and stderr, more than a pipe holds, and the command is waited for, not read: the reader
    threads take both as they come."""
    code = "import sys\nfor i in range(40000): print('x' * 50, i); print('y' * 50, i, file=sys.stderr)"
    command = _processes.run([sys.executable, "-c", code], timeout=60)
    assert command.returncode == 0
    assert len(command.stdout.splitlines()) == len(command.stderr.splitlines()) == 40000


def test_what_a_test_leaves_running_is_found_even_once_orphaned_and_killed():
    """A child and its grandchild still running, and a process whose parent already exited (re-parented out of
    this process's tree): the watch finds all three, by parentage or by the marker they inherit, and kills them."""
    watch = _processes.Watch()
    previous = os.environ[_processes.TEST_MARKER]
    os.environ[_processes.TEST_MARKER] = watch.marker  # as tests/conftest.py does for every test
    try:
        # the shell prints its background sleep's pid and exits: the sleep's parent is gone
        orphan = int(
            subprocess.run(
                ["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True, timeout=30
            ).stdout
        )
        parent = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60; true"])
        deadline = time.monotonic() + 10
        while len(_processes.descendants(parent.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert orphan not in _processes.descendants(os.getpid())  # found by its marker alone
        left = watch.leftovers()
        assert {orphan, parent.pid} | _processes.descendants(parent.pid) <= left, left
        watch.stop(dump=False)
        assert parent.wait(timeout=10) != 0
        assert not [pid for pid in left if _processes.alive(pid)]
        assert not watch.leftovers()
    finally:
        os.environ[_processes.TEST_MARKER] = previous
        watch.stop(dump=False)
