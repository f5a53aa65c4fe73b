"""Checkpoints a remote store could not take: kept on local disk, and delivered in order when it answers again.

A store that times out or refuses connections never stops training. `FsspecSaver(spool=...)` (which
`ModelCheckpoint` sets for every remote directory) keeps a checkpoint it could not write in the spool, a local
folder under the run's root, and later saves go there too while anything waits. Each save first tries to deliver
what waits, oldest first and each committed as a direct save is (data file, then manifest), at most once every
`retry_every` seconds: a hung store costs the loop one bounded attempt per interval, not one per save. Retention's
deletions of remote files wait in the same order; deleting a checkpoint that is still waiting drops it from the
spool. At most `limit` checkpoints wait; beyond, the oldest waiting one is dropped (the newest are what a resume
needs). The run says how far behind it is: a warning at the first checkpoint kept, a line with the count, the
megabytes and the oldest step at each later one, and a line when everything is delivered.

A run that ends, or is killed, with checkpoints waiting leaves them in the spool: the next run with the same
checkpoint directory and root delivers them before it looks for a checkpoint to resume from (`savers.deliver_left_over`).

Only errors that say the store did not answer (`tracktrain.storage.check.is_unreachable`) are spooled: an answer that refuses
(credentials, a missing bucket) or a local fault is the user's to fix, and fails the save as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from tracktrain import storage
from tracktrain.distributed.logger import get_dist_logger

__all__ = ["Spool", "spool_dir_for"]

SPOOL_LIMIT = 4  # checkpoints kept waiting at most
RETRY_EVERY = 60.0  # seconds between attempts to reach a store that did not answer


def spool_dir_for(url: str, root_dir: str) -> str:
    """The local folder that keeps checkpoints waiting for `url`: under the run's local root, one per URL."""
    digest = hashlib.sha256(os.fspath(url).encode()).hexdigest()[:16]
    return os.path.join(storage.local_dir(root_dir), ".checkpoint-spool", digest)


class Spool:
    """The checkpoints and deletions waiting for `target`, in order, in the local folder `directory`."""

    def __init__(self, directory: str, target: str, limit: int = SPOOL_LIMIT, retry_every: float = RETRY_EVERY) -> None:
        self.directory = directory
        self.target = target
        self.limit = limit
        self.retry_every = retry_every
        self._entries = self._read_entries()
        self._next_try = 0.0

    @property
    def is_empty(self) -> bool:
        return not self._entries

    @property
    def waiting(self) -> list[str]:
        """The file names of the checkpoints waiting, oldest first."""
        return [entry["filename"] for entry in self._entries if entry["kind"] == "save"]

    # --------------------------------------------------------------------------------------------- queueing
    def keep(
        self,
        filename: str,
        data: bytes | memoryview,
        summary: Mapping[str, Any],
        metadata: Mapping | None,
        error: BaseException | None = None,
    ) -> None:
        """Keep a checkpoint the store could not take (`error`: why, when this save tried)."""
        first = not self.waiting
        self._drop_waiting(filename)  # the same name saved again replaces it
        entry = {
            "kind": "save",
            "filename": filename,
            "summary": dict(summary),
            "metadata": dict(metadata or {}),
            "bytes": len(data),
            "queued": time.time(),
        }
        self._append(entry, data)
        while len(self.waiting) > self.limit:
            dropped = self.waiting[0]
            self._drop_waiting(dropped)
            get_dist_logger().warning(
                f"Checkpoint {dropped} dropped from the spool for {self.target}: at most "
                f"{self.limit} wait; the newer ones are kept."
            )
        if first:
            cause = f" ({type(error).__name__}: {error})" if error is not None else ""
            warnings.warn(
                f"Could not write checkpoint {filename} to {self.target}{cause}. Training goes on: the checkpoint is "
                f"kept in {self.directory} and delivered when the store answers (tried at the next saves, at most "
                f"every {self.retry_every:g} s; a run started later with this checkpoint directory delivers it "
                "first).",
                stacklevel=2,
            )
        else:
            get_dist_logger().info(self.behind())

    def queue_removal(self, filename: str) -> None:
        """Delete `filename` at the target once what waits before it is delivered (or now, from the spool)."""
        if filename in self.waiting:
            self._drop_waiting(filename)
            return
        self._append({"kind": "remove", "filename": filename, "queued": time.time()}, None)

    def behind(self) -> str:
        """How far the target is behind: the count, the size and the oldest step waiting."""
        saves = [entry for entry in self._entries if entry["kind"] == "save"]
        if not saves:
            return f"Nothing waits for {self.target}."
        megabytes = sum(entry["bytes"] for entry in saves) / 1e6
        oldest = saves[0]
        step = oldest["summary"].get("global_step")
        age = time.time() - oldest["queued"]
        return (
            f"{len(saves)} checkpoint{'s' if len(saves) > 1 else ''} ({megabytes:.1f} MB) wait for "
            f"{self.target}; the oldest, {oldest['filename']}"
            f"{f' (step {step})' if step is not None else ''}, for {age:.0f} s."
        )

    # ------------------------------------------------------------------------------------------- delivering
    def deliver(
        self, write: Callable[[str, bytes, Mapping, Mapping], None], remove: Callable[[str], None], force: bool = False
    ) -> bool:
        """Deliver what waits, in order: `write(filename, data, summary, metadata)` for checkpoints, `remove` for
        deletions. Stops at the first failure (tried again after `retry_every` s, or with `force`). True when
        nothing waits any more."""
        if not self._entries:
            return True
        if not force and time.monotonic() < self._next_try:
            return False
        delivered = 0
        while self._entries:
            entry = self._entries[0]
            try:
                if entry["kind"] == "save":
                    with open(self._data_path(entry), "rb") as file:
                        data = file.read()
                    write(entry["filename"], data, entry["summary"], entry["metadata"])
                    delivered += 1
                else:
                    remove(entry["filename"])
            except Exception as error:  # noqa: BLE001 - anything that stops delivery: it waits, and is retried
                self.failed_now()
                get_dist_logger().info(
                    f"{self.target} still cannot take the waiting checkpoints "
                    f"({type(error).__name__}: {error}). {self.behind()}"
                )
                return False
            self._forget(entry)
        if delivered:
            get_dist_logger().info(
                f"{self.target} answers again: the {delivered} checkpoint"
                f"{'s' if delivered > 1 else ''} that waited {'are' if delivered > 1 else 'is'} "
                "delivered."
            )
        return True

    def failed_now(self) -> None:
        """The target did not answer just now: no attempt before `retry_every` seconds."""
        self._next_try = time.monotonic() + self.retry_every

    # ---------------------------------------------------------------------------------------------- on disk
    # One entry is `<seq>.json` (its description) and, for a checkpoint, `<seq>.data`; the JSON is written last,
    # so an entry without it (a kill while keeping) is not one, and is removed when the spool is read.
    def _read_entries(self) -> list[dict[str, Any]]:
        if not os.path.isdir(self.directory):
            return []
        entries = []
        for name in sorted(os.listdir(self.directory)):
            path = os.path.join(self.directory, name)
            if name.endswith(".json"):
                try:
                    with open(path, encoding="utf-8") as file:
                        entries.append(json.load(file))
                except (OSError, ValueError):
                    os.remove(path)
        complete = {entry["seq"] for entry in entries}
        for name in os.listdir(self.directory):
            if name.endswith(".data") and int(name.split(".")[0]) not in complete:
                os.remove(os.path.join(self.directory, name))  # a kill while keeping it: never described
        return sorted(entries, key=lambda entry: entry["seq"])

    def _append(self, entry: dict[str, Any], data: bytes | memoryview | None) -> None:
        os.makedirs(self.directory, exist_ok=True)
        entry["seq"] = self._entries[-1]["seq"] + 1 if self._entries else 0
        if data is not None:
            storage.write_bytes_atomic(self._data_path(entry), data)
        storage.write_bytes_atomic(self._json_path(entry), json.dumps(entry).encode())
        self._entries.append(entry)

    def _drop_waiting(self, filename: str) -> None:
        for entry in [entry for entry in self._entries if entry["kind"] == "save" and entry["filename"] == filename]:
            self._forget(entry)

    def _forget(self, entry: dict[str, Any]) -> None:
        os.remove(self._json_path(entry))  # first: from here on the entry is not one
        if entry["kind"] == "save":
            os.remove(self._data_path(entry))
        self._entries.remove(entry)

    def _json_path(self, entry: Mapping[str, Any]) -> str:
        return os.path.join(self.directory, f"{entry['seq']:08d}.json")

    def _data_path(self, entry: Mapping[str, Any]) -> str:
        return os.path.join(self.directory, f"{entry['seq']:08d}.data")
