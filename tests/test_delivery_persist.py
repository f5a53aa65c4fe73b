"""DeliveryQueue.persist: before a checkpoint commits, what a tracker has not received yet goes to disk, so a
process killed after the commit loses nothing (the resumed run never logs those steps again)."""

from __future__ import annotations

import threading

from tracktrain.loggers.delivery import DeliveryQueue, Record


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


def test_records_in_flight_and_waiting_survive_a_kill_after_persist(tmp_path):
    spill = tmp_path / "run.undelivered.jsonl"
    send = HeldSend(timeout=None)  # the "killed" queue's send never returns (its daemon thread just stays)
    queue = DeliveryQueue(send, spill, {"logger": "test"}, linger=0.0)
    queue.put(metrics(1))
    assert send.entered.wait(5)  # step 1 is in flight, stuck
    for step in (2, 3):
        queue.put(metrics(step))
    queue.persist()
    # the process is killed here: the queue's memory is gone; a new attempt of the run opens the same spill file
    again = HeldSend()
    again.calls = 1  # no hold
    replayed = DeliveryQueue(again, spill, {"logger": "test"}, linger=0.0)
    assert replayed.close(timeout=5) == 0
    assert again.delivered == [1, 2, 3]


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
