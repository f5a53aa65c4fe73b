"""DeliveryQueue.persist: before a checkpoint commits, what a tracker has not received yet goes to disk, so a
process killed after the commit loses nothing (the resumed run never logs those steps again). The kill is a real
SIGKILL of a run's processes (tests/_delivery_run.py); the other cases hold a send in this process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tracktrain.loggers.delivery import DeliveryQueue, Record, read_spill

ROOT = Path(__file__).resolve().parents[1]


class HeldSend:
    """A tracker whose first send hangs until released (the batch stays in flight), then answers or fails."""

    def __init__(self, first_fails: bool = False, timeout: float | None = 10) -> None:
        self.timeout = timeout
        self.release = threading.Event()
        self.entered = threading.Event()
        self.first_fails = first_fails
        self.calls = 0
        self.delivered: list[int] = []

    def __call__(self, batch: list[Record]) -> None:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            self.release.wait(self.timeout)
            if self.first_fails:
                raise ConnectionError("tracker went away")
        self.delivered += [record.step for record in batch]


def metrics(step: int) -> Record:
    return Record("metrics", {"loss": float(step)}, step)


def _run(mode: str, root, target) -> subprocess.Popen:
    """tests/_delivery_run.py in a process of its own (the training process of a run logging through a sender child)."""
    code = "from tests._delivery_run import main; main()"
    return subprocess.Popen(
        [sys.executable, "-c", code, mode, str(root), str(target)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _gone(pid: int, timeout: float = 30.0) -> bool:
    """Whether process `pid` has ended (a killed sender child is reaped by whoever adopted it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True  # killed, not yet reaped by its new parent
        except FileNotFoundError:
            return True
        time.sleep(0.02)
    return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states in /proc")
@pytest.mark.timeout(240)
def test_records_in_flight_and_waiting_survive_a_sigkill_after_persist(tmp_path):
    """Step 1 is in the sender child's hands and steps 2 and 3 wait in the training process when `persist` runs;
    then both processes are killed with SIGKILL. The spill file holds all three, and the run started again
    delivers them, once each, in order."""
    target = tmp_path / "tracker.jsonl"
    Path(f"{target}.hold").touch()  # every send waits while this exists: step 1 stays in flight
    first = _run("first", tmp_path / "root", target)
    try:
        said = first.stdout.readline().split()
        assert said[:1] == ["persisted"], first.communicate(timeout=60)[1][-3000:]
        sender_pid, spill = int(said[1]), said[2]
        assert sender_pid != first.pid
        os.kill(sender_pid, signal.SIGKILL)  # the delivering child, with step 1 in hand
        first.send_signal(signal.SIGKILL)  # and the training process, steps 2 and 3 in its memory
        first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert first.returncode == -signal.SIGKILL
    assert _gone(sender_pid)
    os.remove(f"{target}.hold")
    assert not target.exists()  # neither process delivered anything

    header, survived = read_spill(spill)  # what the kill left on disk
    assert header["run_id"] == "run-1" and header["target"] == str(target)
    assert [(record.kind, record.step, record.payload) for record in survived] == [
        ("metrics", 1, {"loss": 1.0}),
        ("metrics", 2, {"loss": 0.5}),
        ("metrics", 3, {"loss": 0.25}),
    ]

    again = _run("restart", tmp_path / "root", target)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0 and out.split() == ["finished", "0"], err[-3000:]
    delivered = [json.loads(line) for line in target.read_text().splitlines()]
    assert [(line["kind"], line["step"]) for line in delivered] == [("metrics", 1), ("metrics", 2), ("metrics", 3)]
    assert {line["pid"] for line in delivered}.isdisjoint({first.pid, sender_pid})  # by the restarted run's child
    assert target.with_suffix(".status").read_text() == "FINISHED"
    assert not os.path.exists(spill)  # all delivered: the spill file is removed


def test_a_batch_delivered_after_persist_is_not_delivered_twice(tmp_path):
    send = HeldSend()
    queue = DeliveryQueue(send, tmp_path / "run.undelivered.jsonl", {"logger": "test"}, linger=0.0)
    queue.put(metrics(1))
    assert send.entered.wait(5)
    queue.put(metrics(2))
    queue.persist()
    send.release.set()
    assert queue.close(timeout=5) == 0
    assert send.delivered == [1, 2]
    assert not (tmp_path / "run.undelivered.jsonl").exists()  # all delivered: the file is removed


def test_a_batch_that_fails_after_persist_is_retried_from_disk_once(tmp_path):
    send = HeldSend(first_fails=True)
    queue = DeliveryQueue(send, tmp_path / "run.undelivered.jsonl", {"logger": "test"}, linger=0.0)
    queue.put(metrics(1))
    assert send.entered.wait(5)
    queue.put(metrics(2))
    queue.persist()
    send.release.set()
    assert queue.close(timeout=10) == 0
    assert send.delivered == [1, 2]
