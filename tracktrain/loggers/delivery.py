"""`DeliveryQueue`: records go to a tracker from a background thread, in batches, without ever blocking training.

`put` only appends to memory. A worker thread sends batches through the tracker's batch API; when the tracker
fails (slow, down, rejecting), the batch is retried with exponential backoff while new records wait. Memory is
bounded: past `max_pending` records, the oldest waiting ones are spilled to a local JSON-lines file, and replayed
from it, in order, once the tracker answers again. Nothing is dropped silently: whatever is still undelivered at
`close` stays in the spill file, whose location is reported, and `replay` sends it later. The queue counts every
record it takes: `flush` reports success only when each one is delivered, and a record that is neither delivered nor
waiting anywhere (a bug) is reported as lost (`lost`, an error logged), never passed over.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["DeliveryQueue", "Record", "read_spill"]

_logger = logging.getLogger(__name__)


@dataclass
class Record:
    """One thing to send: `kind` is "metrics" (payload {name: float}, with `step`), "params", "tags" or "artifact"
    (payload {"local_path": ..., "artifact_path": ...})."""

    kind: str
    payload: dict[str, Any]
    step: int | None = None
    timestamp: float = field(default_factory=time.time)


class DeliveryQueue:
    """Sends `Record`s with `send(batch)` from a background thread; see the module's docstring.

    Args:
        send: delivers a list of records, raising on failure (the whole batch is then retried). It is given a copy:
            a send that takes records off its list as it goes loses none of them when it fails.
        spill_path: the JSON-lines file for records that wait too long in memory or are undelivered at the end.
        header: written as the spill file's first line, so `replay` knows where the records belong.
        max_pending: records kept in memory before the oldest are spilled.
        batch_size: the most records per `send`.
        max_backoff: the longest wait between retries, in seconds.
        linger: how long the thread lets records gather before sending a batch that is not full (every-step
            logging then costs one request per `linger`, not one per step); `flush` and `close` cut it short.
        interrupt: called by `close` when it gives up on a send still running, to end that send at once (a child
            process that sends is stopped); the send must then raise. Without it, `close` waits for the thread a
            little, and the send goes on alone.
    """

    def __init__(
        self,
        send: Callable[[list[Record]], None],
        spill_path: str | os.PathLike,
        header: dict[str, Any],
        max_pending: int = 10_000,
        batch_size: int = 1_000,
        max_backoff: float = 30.0,
        name: str = "tracker",
        linger: float = 0.5,
        interrupt: Callable[[], None] | None = None,
    ) -> None:
        self._send = send
        self._interrupt = interrupt
        self.spill_path = Path(spill_path)
        self._header = header
        self.max_pending = max_pending
        self.batch_size = batch_size
        self.max_backoff = max_backoff
        self.linger = linger
        self.name = name
        self._pending: deque[Record] = deque()
        self._spilled = 0  # records in the spill file not yet delivered
        self._spill_read_at = 0  # byte position of the first undelivered record in the spill file
        self._condition = threading.Condition()
        self._in_flight: list[Record] = []
        self._in_flight_from_spill = False
        self._in_flight_spilled_to: int | None = None  # set by persist: the spill file's offset after the batch
        self._hurry = False  # a flush or close is waiting: send without lingering
        self._closing = False
        self.delivered = 0
        self.failures = 0
        self.lost = 0  # records neither delivered nor waiting anywhere (see `flush`): 0 unless a bug drops some
        self.last_error: BaseException | None = None
        if self.spill_path.exists():  # left by an earlier attempt of this run: delivered first, in order
            with open(self.spill_path, "rb") as lines:
                lines.readline()
                self._spill_read_at = lines.tell()
                self._spilled = sum(1 for line in lines if b'"kind": "status"' not in line)
        self._accepted = self._spilled  # records this queue answers for: those of the file, and every `put`
        self._thread = threading.Thread(target=self._run, name=f"tracktrain-{name}-delivery", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------------------------------- training side
    def put(self, record: Record) -> None:
        """Queue `record`; returns at once (at worst after appending a line to the spill file)."""
        with self._condition:
            self._pending.append(record)
            self._accepted += 1
            if len(self._pending) > self.max_pending:
                # half of the waiting records at once: one file write (and fsync) per max_pending / 2 records
                self._spill([self._pending.popleft() for _ in range(len(self._pending) // 2)])
            if len(self._pending) == 1 or len(self._pending) >= self.batch_size:
                self._condition.notify_all()

    def persist(self) -> None:
        """Spill the records held in memory to the spill file (fsynced): from here on a killed process loses none
        of them; they are delivered from there, in order, like any spilled record (by this queue, the next attempt
        of the run, or `replay`). A batch being sent right now from memory is spilled too, ahead of the records the
        file holds (they are newer); if its send then succeeds, the file's reader skips it."""
        with self._condition:
            if self._in_flight and self._in_flight_spilled_to is None and not self._in_flight_from_spill:
                if self._spilled:
                    self._in_flight_spilled_to = self._write_ahead(self._in_flight)
                else:
                    self._in_flight_spilled_to = self._spill(self._in_flight)
            self._spill([self._pending.popleft() for _ in range(len(self._pending))])

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything queued so far is delivered, at most `timeout` seconds; whether it was. False too,
        however long it waits, once a record was lost (neither delivered nor waiting: see `lost`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._condition:
            self._hurry = True
            self._condition.notify_all()
            try:
                while self._pending or self._spilled or self._in_flight:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._condition.wait(0.5 if remaining is None else min(remaining, 0.5))
                return self._check_lost(self._accepted - self.delivered) == 0
            finally:
                self._hurry = False

    def wake(self) -> None:
        """Cut a retry's backoff short: the tracker is known to answer again."""
        with self._condition:
            self._condition.notify_all()

    def close(self, timeout: float = 30.0, final: Record | None = None) -> int:
        """Deliver what is queued (at most `timeout` seconds), stop the thread, and spill what is left; returns
        the number of records left undelivered in the spill file (0: all delivered, and the file removed).
        `final` (the run's end status) is appended to a spill file that remains, for `replay`. Returns within
        `timeout` and a second (a request that overran is interrupted, not waited for)."""
        deadline = time.monotonic() + timeout
        self.flush(timeout)
        with self._condition:
            self._closing = True
            self._condition.notify_all()
            interrupt = self._interrupt if self._in_flight else None
        if interrupt is not None:
            interrupt()
        self._thread.join(timeout=max(1.0, deadline - time.monotonic()))
        with self._condition:
            # a send still running (a hung request) may yet fail: its records are kept too (trackers take a
            # record sent twice as one)
            in_flight = [] if self._in_flight_spilled_to is not None else list(self._in_flight)
            leftover = in_flight + list(self._pending)
            self._pending.clear()
            self._spill(leftover)
            left = self._spilled
            # everything not delivered is in the spill file now (a record there twice counts twice: never a loss)
            self._check_lost(self._accepted - self.delivered - left)
            if left and final is not None:
                self._spill([final], count=False)
        if left == 0 and self.spill_path.exists():
            self.spill_path.unlink()
        return left

    # ------------------------------------------------------------------------------------------ the thread
    def _run(self) -> None:
        backoff = 0.5
        while True:
            with self._condition:
                while not (self._pending or self._spilled or self._closing):
                    self._condition.wait()
                if self._closing and (self.last_error is not None or not (self._pending or self._spilled)):
                    return  # done, or the tracker is down: what is left goes to the spill file
                if not (self._hurry or self._closing or self._spilled) and len(self._pending) < self.batch_size:
                    self._condition.wait(self.linger)  # let a batch gather (put wakes us when it is full)
                batch, from_spill = self._next_batch()
                if not batch:
                    continue
                self._in_flight, self._in_flight_from_spill = batch, from_spill
            try:
                self._send(list(batch))  # its own list: the batch stays whole for a retry
            except Exception as error:  # the tracker's own errors: keep the records, try again later
                with self._condition:
                    self._in_flight = []
                    if self._in_flight_spilled_to is not None:  # persist moved them to the spill file
                        self._in_flight_spilled_to = None
                    elif from_spill:
                        pass  # still in the spill file, where the next batch is read
                    elif self._spilled:  # newer records were spilled meanwhile: the batch goes ahead of them
                        if self._write_ahead(batch) is None:  # kept in memory: sent after the newer ones, but sent
                            self._pending.extendleft(reversed(batch))
                    else:
                        self._pending.extendleft(reversed(batch))
                    self.failures += 1
                    if self.last_error is None:
                        _logger.warning(
                            "%s is not taking records (%s); training goes on, retrying in the background",
                            self.name,
                            error,
                        )
                    self.last_error = error
                    if self._closing:
                        return
                    self._condition.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)
                continue
            with self._condition:
                self._in_flight = []
                self.delivered += len(batch)
                if from_spill:
                    self._spill_read_at = self._spill_next_at
                    self._spilled -= len(batch)
                elif self._in_flight_spilled_to is not None:  # delivered after all: not to be read back
                    self._spill_read_at = self._in_flight_spilled_to
                    self._spilled -= len(batch)
                    self._in_flight_spilled_to = None
                if self.last_error is not None:
                    _logger.warning("%s is taking records again", self.name)
                self.last_error = None
                self._condition.notify_all()
            backoff = 0.5

    def _write_ahead(self, records: list[Record]) -> int | None:
        """Put `records` in the spill file ahead of the undelivered records there (called with the lock held) and
        return the file's offset after them; None when the file could not be written. A batch taken from memory is
        older than whatever was spilled while it was out, and the file is sent first. The file is written anew (a
        rare path: a failed send, or `persist`, while the file holds records)."""
        lines = [json.dumps(asdict(record), default=str).encode() + b"\n" for record in records]
        temporary = self.spill_path.with_name(self.spill_path.name + ".tmp")
        try:
            with open(self.spill_path, "rb") as spilled, open(temporary, "wb") as out:
                out.write(spilled.readline())  # the header
                start = out.tell()
                out.writelines(lines)
                spilled.seek(self._spill_read_at)
                while chunk := spilled.read(1 << 20):
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, self.spill_path)
        except OSError as error:
            _logger.warning("Could not put a batch ahead of newer records in %s (%s)", self.spill_path, error)
            return None
        self._spill_read_at = start
        self._spilled += len(records)
        return start + sum(len(line) for line in lines)

    def _check_lost(self, unaccounted: int) -> int:
        """Takes the count of records neither delivered nor waiting (called with the lock held): reports a new loss
        (an error naming the count) and returns it."""
        if unaccounted > self.lost:
            _logger.error(
                "%d record(s) for %s were lost: taken by the delivery queue, then neither delivered nor "
                "kept (in memory or in %s). This is a bug in tracktrain; please report it.",
                unaccounted - self.lost,
                self.name,
                self.spill_path,
            )
            self.lost = unaccounted
        return self.lost

    def _next_batch(self) -> tuple[list[Record], bool]:
        """The oldest records first: those in the spill file, then those in memory."""
        if self._spilled:
            records, self._spill_next_at = _read_records(self.spill_path, self._spill_read_at, self.batch_size)
            return records, True
        count = min(self.batch_size, len(self._pending))
        return [self._pending.popleft() for _ in range(count)], False

    def _spill(self, records: Iterable[Record], count: bool = True) -> int | None:
        """Append `records` to the spill file (called with the lock held); returns the file's offset after them."""
        records = list(records)
        if not records:
            return None
        # values JSON cannot hold (a dtype in the hyperparameters) are kept as their text, never lost
        lines = [json.dumps(asdict(record), default=str) + "\n" for record in records]
        new_file = not self.spill_path.exists()
        self.spill_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.spill_path, "a", encoding="utf-8") as out:
            if new_file:
                out.write(json.dumps({"header": self._header}, default=str) + "\n")
                self._spill_read_at = out.tell()
            out.writelines(lines)
            out.flush()
            os.fsync(out.fileno())
            end = out.tell()
        if count:
            self._spilled += len(records)
        return end


def _read_records(path: Path, position: int, limit: int) -> tuple[list[Record], int]:
    """Up to `limit` records of a spill file from byte `position`, and the position after them (reading costs the
    batch, not the file)."""
    records: list[Record] = []
    with open(path, "rb") as lines:
        lines.seek(position)
        while len(records) < limit:
            line = lines.readline()
            if not line:
                break
            record = Record(**json.loads(line))
            position = lines.tell()
            if record.kind != "status":  # a run's end status is for replay, not for sending
                records.append(record)
    return records, position


def read_spill(path: str | os.PathLike, skip: int = 0, limit: int | None = None) -> tuple[dict[str, Any], list[Record]]:
    """The header and records of a spill file (after the first `skip` records, at most `limit`)."""
    with open(path, encoding="utf-8") as lines:
        header = json.loads(next(lines))["header"]
        records: list[Record] = []
        for index, line in enumerate(lines):
            if index < skip:
                continue
            if limit is not None and len(records) >= limit:
                break
            records.append(Record(**json.loads(line)))
    return header, records
