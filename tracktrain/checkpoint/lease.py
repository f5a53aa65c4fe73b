"""One writer per checkpoint directory: a lease file that the writing process holds while it trains.

Two runs given the same directory (a second terminal, a job re-queued while the first still runs) would both write
there, and each one's retention would delete the other's checkpoints. So the writing rank of a run holds
`<directory>/.tracktrain-lease.json` from the start of fit to its end (times are wall-clock UTC seconds):

    {"format": "tracktrain-lease/1", "holder": "<random id of the process>", "host": "...", "pid": 1234,
     "boot_id": "...", "pid_namespace": "...", "started": 1767225600.0, "heartbeat": 1767225630.0,
     "stale_after": 120.0}

- `acquire` takes the lease when there is none, or when it is this process's own. A live lease of another process
  raises `LeaseHeld` at once, naming that process, the file and the fix. A stale one is taken over with a
  `LeaseWarning` naming its holder. Stale means: on the same machine (same host name, boot and pid namespace) its
  process is gone, which is what a re-run after a crash or a SIGKILL finds, so that run starts at once; or, on any
  machine, its heartbeat is older than its `stale_after` (another machine's pids cannot be checked, and on this one
  a pid may have been reused). Hosts' clocks are compared: a skew of seconds does not matter against minutes.
- A daemon thread refreshes the heartbeat every `heartbeat_interval` seconds (`HEARTBEAT_INTERVAL`; stale after
  `STALE_AFTER_BEATS` of them). A refresh that fails (the store is down) warns once and tries again at the next
  interval: training never stops for it. One that finds another holder in the file (who took it over as stale)
  warns and stops refreshing; it never raises.
- `release` stops the thread and deletes the file if it is still this process's. `ModelCheckpoint` releases at the
  end of fit and on exceptions, and an exit handler releases what is left. A process killed with SIGKILL leaves
  its lease behind for the next start to take over.

Users in one process (two ModelCheckpoint callbacks on one directory) share its lease: the process is the holder,
and the file goes when the last user releases it.

Races. On a local disk (and in `memory://`) a missing lease is created exclusively (`storage.create_exclusive`): of
two processes starting at once, exactly one wins. Object stores offer no create-if-absent in general, and taking
over a stale lease replaces a file anywhere, so there the lease is written, read back `settle` seconds later, and
held only if it still names this process. The window that remains: a process that read the lease before this one
wrote it, and writes its own more than `settle` seconds after this one's write (a store that slow), also believes
it holds the lease; the next heartbeat of the one overwritten finds the other and warns. Heartbeats and `release`
read, then write or delete, with the same kind of window against a takeover in between; a takeover needs the lease
to be stale, so that holder had stopped heartbeating anyway.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
import uuid
import warnings
from dataclasses import replace

from tracktrain import storage  # its public names, so a replaced one (a test's outage) reaches the lease too
from tracktrain.checkpoint.lease_record import LeaseRecord, is_finite, stale_reason, this_machine
from tracktrain.checks.refusal import Refusal

__all__ = [
    "HEARTBEAT_INTERVAL",
    "LEASE_NAME",
    "Lease",
    "LeaseHeld",
    "LeaseRecord",
    "LeaseWarning",
    "STALE_AFTER_BEATS",
    "acquire",
    "release",
    "status",
]

LEASE_NAME = ".tracktrain-lease.json"  # hidden: checkpoint listings and retention skip it
HEARTBEAT_INTERVAL = 30.0  # seconds between heartbeats, unless `acquire` is given another
STALE_AFTER_BEATS = 4  # a lease whose last heartbeat is this many intervals old is stale
SETTLE_LOCAL = 0.2  # seconds between writing a lease and reading it back: longer than a rival's read-to-write
SETTLE_REMOTE = 1.0


class LeaseHeld(Refusal, RuntimeError):
    """Another live process holds the lease of the checkpoint directory. `record`: its lease; `url`: the file."""

    def __init__(self, message: str, record: LeaseRecord | None = None, url: str | None = None) -> None:
        super().__init__(message)
        self.record = record
        self.url = url


class LeaseWarning(UserWarning):
    """A lease taken over from a stale holder, lost to another, or whose heartbeat cannot be written."""


class Lease:
    """This process's hold on the lease of one directory, and its heartbeat thread. Made by `acquire`."""

    def __init__(self, url: str, record: LeaseRecord, heartbeat_interval: float) -> None:
        self.url = url
        self.record = record
        self.heartbeat_interval = heartbeat_interval
        self.lost_to: LeaseRecord | None = None  # the holder that took the lease over, once a heartbeat found one
        self._users: dict[int, object] = {}  # id -> user; the reference keeps the id from being reused
        self._failing = False
        self._recreated = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat_until_stopped, name="tracktrain-lease-heartbeat", daemon=True)
        self._thread.start()

    def _beat_until_stopped(self) -> None:
        while not self._stop.wait(self.heartbeat_interval) and self._beat():
            pass

    def _beat(self) -> bool:
        """Refresh the heartbeat; False once another holder has the lease (then the thread ends). Never raises:
        a failure warns once per outage, and the next interval tries again."""
        try:
            try:
                current = _read(self.url)
            except _Damaged:
                current = self.record  # the file is ours to repair
            if current is not None and current.holder != self.record.holder:
                self.lost_to = current
                warnings.warn(
                    f"ANOTHER WRITER TOOK OVER the checkpoint lease {self.url}: it is now held by "
                    f"{current.describe(time.time())}, which judged this run's lease stale. Both runs now write to "
                    "this directory, and their retention can delete each other's checkpoints. Stop one of them.",
                    LeaseWarning,
                    stacklevel=1,
                )
                return False
            record = replace(self.record, heartbeat=time.time())
            if self._stop.is_set():  # released meanwhile: leave the file to `release`
                return False
            storage.write_bytes_atomic(self.url, record.to_bytes())
        except Exception as error:
            if not self._failing:
                self._failing = True
                warnings.warn(
                    f"Could not refresh the checkpoint lease {self.url} ({type(error).__name__}: {error}). Training "
                    f"goes on, and the heartbeat is tried again every {self.heartbeat_interval:g} s; if it keeps "
                    f"failing for {self.record.stale_after:g} s, another run may take this directory over.",
                    LeaseWarning,
                    stacklevel=1,
                )
            return True
        if current is None and not self._recreated:
            self._recreated = True
            warnings.warn(
                f"The checkpoint lease {self.url} was deleted while this run held it; it was written again.",
                LeaseWarning,
                stacklevel=1,
            )
        self.record = record
        self._failing = False
        return True

    def _close(self) -> None:
        """Stop the heartbeat, and delete the file if it still names this process."""
        self._stop.set()
        self._thread.join(timeout=10.0)  # a refresh may be under way; a hung store must not hang the end of fit
        if self.lost_to is not None:
            return
        try:
            try:
                current = _read(self.url)
            except _Damaged:
                current = None  # not recognisably ours: left alone
            if current is not None and current.holder == self.record.holder:
                storage.remove(self.url, missing_ok=True)
        except Exception as error:
            warnings.warn(
                f"Could not release the checkpoint lease {self.url} ({type(error).__name__}: {error}). The "
                "next run on this directory takes it over as stale.",
                LeaseWarning,
                stacklevel=1,
            )


def acquire(
    directory: str | os.PathLike, user: object, *, heartbeat_interval: float | None = None, settle: float | None = None
) -> Lease:
    """Hold the lease of the checkpoint directory `directory` for `user` (release it with the same `user`); see the
    module docstring. LeaseHeld when another live process holds it.

    heartbeat_interval: seconds between heartbeats (default `HEARTBEAT_INTERVAL`); the lease is stale after
        `STALE_AFTER_BEATS` of them. Ignored when this process holds the lease already.
    settle: seconds to wait before reading back a lease written where no exclusive create exists (default
        `SETTLE_LOCAL` on local disks, `SETTLE_REMOTE` elsewhere).
    """
    interval = HEARTBEAT_INTERVAL if heartbeat_interval is None else heartbeat_interval
    if not (is_finite(interval) and interval > 0):
        raise ValueError(f"heartbeat_interval must be a positive number of seconds, got {heartbeat_interval!r}.")
    key = _key(directory)
    with _LOCK:
        lease = _HELD.get(key)
        if lease is None:
            lease = _take(storage.join(directory, LEASE_NAME), interval, settle)
            _HELD[key] = lease
        lease._users[id(user)] = user
        return lease


def release(directory: str | os.PathLike, user: object) -> None:
    """`user` no longer needs the lease of `directory`; the last user's release stops the heartbeat and deletes the
    file if it is still this process's. Nothing happens for a user that holds none (an `acquire` that failed)."""
    if not _HELD:  # the other ranks, and a failed acquire: nothing to look up
        return
    with _LOCK:
        key = _key(directory)
        lease = _HELD.get(key)
        if lease is None or lease._users.pop(id(user), None) is None or lease._users:
            return
        del _HELD[key]
        lease._close()  # under the lock: an acquire of the same directory waits until the file is gone


def _take(url: str, interval: float, settle: float | None) -> Lease:
    """Take the lease at `url` for this process, or raise LeaseHeld."""
    for attempt in range(4):  # a lease that appears, vanishes or is cut short while looked at is looked at again
        now = time.time()
        mine = _new_record(now, interval)
        try:
            current, damage = _read(url), None
        except _Damaged as error:
            current, damage = None, str(error)
            if attempt == 0:  # an exclusive create is one write after it: give that instant to end
                time.sleep(0.1)
                continue
        if current is None and damage is None:
            try:
                if storage.create_exclusive(url, mine.to_bytes()):
                    return Lease(url, mine, interval)
                continue  # another process created it since the read: look at theirs
            except NotImplementedError:
                pass  # an object store: write, then read back
        reason = None
        if current is not None and current.holder != mine.holder:
            reason = stale_reason(current, now)
            if reason is None:
                raise LeaseHeld(_held_message(url, current, now), current, url)
        storage.write_bytes_atomic(url, mine.to_bytes())
        time.sleep((SETTLE_LOCAL if storage.is_local(url) else SETTLE_REMOTE) if settle is None else settle)
        try:
            back = _read(url)
        except _Damaged:
            back = None
        if back is not None and back.holder != mine.holder:  # a rival wrote after this process: it won
            raise LeaseHeld(_held_message(url, back, time.time()), back, url)
        if back is None:
            continue
        if current is not None and reason is not None:
            warnings.warn(
                f"Took over the checkpoint lease {url} from {current.describe(now)}: {reason}. If that run is in fact "
                "still writing, stop it: two runs writing to one directory delete each other's checkpoints.",
                LeaseWarning,
                stacklevel=4,
            )
        elif damage is not None:
            warnings.warn(f"Replaced the damaged checkpoint lease {url} ({damage}).", LeaseWarning, stacklevel=4)
        return Lease(url, mine, interval)
    raise LeaseHeld(
        f"Could not take the checkpoint lease {url}: it kept changing while this run looked at it, so "
        "another run is starting on this directory at the same time. Start one run per directory.",
        None,
        url,
    )


def status(directory: str | os.PathLike) -> str:
    """One line on who writes to the checkpoint directory `directory`: nobody, a live run (host, pid, last
    heartbeat), or a lease left by a run that is gone (and why it counts as gone)."""
    url = storage.join(directory, LEASE_NAME)
    try:
        record = _read(url)
    except _Damaged as error:
        return f"a damaged lease file ({error}): the next run takes it over"
    if record is None:
        return "no run is writing here"
    now = time.time()
    stale = stale_reason(record, now)
    if stale is not None:
        return f"left by {record.describe(now)}, which is gone ({stale})"
    return f"being written by {record.describe(now)}"


def _held_message(url: str, record: LeaseRecord, now: float) -> str:
    directory = url[: -len(LEASE_NAME)].rstrip("/" + os.sep)
    if (record.host, record.boot_id, record.pid_namespace) == this_machine():
        why = "that process is running"
    else:
        why = (
            f"it counts as gone once its heartbeat is more than {record.stale_after:g} s old, in about "
            f"{max(record.stale_after - (now - record.heartbeat), 0):.0f} s if it has stopped"
        )
    return (
        f"Another run is writing checkpoints to {directory}: {record.describe(now)} holds the lease {url}, and "
        f"{why}. Two runs writing to one directory delete each other's checkpoints. Stop that run or wait for it to "
        "end, or give this run another directory (Trainer(default_root_dir=...) or ModelCheckpoint(dirpath=...)). "
        f"If you are sure that run is gone, delete {url}."
    )


class _Damaged(ValueError):
    """A lease file that is not a valid lease (cut short, edited)."""


def _read(url: str) -> LeaseRecord | None:
    """The lease at `url`, None when there is none; _Damaged when it is not valid; storage errors as they come."""
    try:
        data = storage.read_bytes(url)
    except FileNotFoundError:
        return None
    try:
        return LeaseRecord.parse(data)
    except ValueError as error:
        raise _Damaged(str(error)) from None


def _new_record(now: float, interval: float) -> LeaseRecord:
    host, boot_id, pid_namespace = this_machine()
    return LeaseRecord(
        holder=_HOLDER,
        host=host,
        pid=os.getpid(),
        boot_id=boot_id,
        pid_namespace=pid_namespace,
        started=now,
        heartbeat=now,
        stale_after=STALE_AFTER_BEATS * interval,
    )


def _key(directory: str | os.PathLike) -> str:
    """One name per directory, however it is spelled (`/a/b`, `file:///a/b/`)."""
    fs, path = storage.open_filesystem(directory)
    return fs.unstrip_protocol(path.rstrip("/") or "/")


_HOLDER = uuid.uuid4().hex
_HELD: dict[str, Lease] = {}
_LOCK = threading.RLock()


def _release_all() -> None:
    """At exit: release what a run that did not end normally still holds."""
    with _LOCK:
        leases = list(_HELD.values())
        _HELD.clear()
    for lease in leases:
        with contextlib.suppress(Exception):
            lease._close()


def _after_fork_in_child() -> None:
    # A forked child (a DataLoader worker) holds nothing: its parent does. It gets its own id, and fresh state.
    global _HOLDER, _HELD, _LOCK
    _HOLDER, _HELD, _LOCK = uuid.uuid4().hex, {}, threading.RLock()


atexit.register(_release_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
