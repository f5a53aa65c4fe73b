"""The `Logger` protocol every tracker implements, and `QueuedLogger`, the base that makes delivery
non-blocking: `log_*` only queue records; a `DeliveryQueue` sends them from a background thread."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from tracktrain.loggers.delivery import DeliveryQueue, Record

__all__ = ["Logger", "QueuedLogger", "flatten_params"]

STATUSES = ("FINISHED", "FAILED", "KILLED")


class Logger(ABC):
    """What the Trainer needs from a tracker. Every method is called on rank 0 only, from the training thread,
    and must return quickly. `run_id` is saved in checkpoints; `resume(run_id)` before `start` continues that run.
    """

    name: str = "logger"

    @property
    @abstractmethod
    def run_id(self) -> str | None: ...

    def resume(self, run_id: str) -> None:
        """Continue the run `run_id` (from a checkpoint) instead of starting a new one; before `start`."""

    @abstractmethod
    def start(self, root_dir: str) -> None:
        """Open the run (new, or the one given to `resume`); `root_dir` is the Trainer's default_root_dir."""

    @abstractmethod
    def log_hyperparams(self, params: Mapping[str, Any]) -> None: ...

    @abstractmethod
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...

    def log_artifact(self, local_path: str, artifact_path: str | None = None) -> None:
        """Upload a file (a checkpoint, a config); trackers without artifacts ignore it."""

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Tag the run; trackers without tags ignore it."""

    def flush(self, timeout: float | None = None) -> bool:
        """Deliver what is queued, waiting at most `timeout` seconds; whether all of it was."""
        return True

    @abstractmethod
    def finalize(self, status: str) -> None:
        """End the run with `status` ("FINISHED", "FAILED" or "KILLED"), delivering what is queued first."""


class QueuedLogger(Logger):
    """A Logger whose records travel through a `DeliveryQueue`: subclasses implement `_open` (create or resume
    the run, return its id), `_send` (deliver a batch with the tracker's batch API, raising on failure) and
    `_close` (mark the run ended).

    Args:
        flush_timeout: how long `flush` (at every log interval and epoch end) may wait for the tracker; it never
            waits longer, whatever the tracker does.
        close_timeout: how long the end of the run waits for the remaining records before they stay in the spill
            file.
        max_pending: records kept in memory while the tracker is unreachable before spilling to disk.
        linger: how long records may gather into one batch before they are sent (see `DeliveryQueue`).
    """

    def __init__(self, flush_timeout: float = 0.0, close_timeout: float = 30.0, max_pending: int = 10_000,
                 linger: float = 0.5) -> None:
        self.linger = linger
        self.flush_timeout = flush_timeout
        self.close_timeout = close_timeout
        self.max_pending = max_pending
        self._run_id: str | None = None
        self._queue: DeliveryQueue | None = None
        self.spill_path: str | None = None
        self.undelivered = 0

    @property
    def run_id(self) -> str | None:
        return self._run_id

    def resume(self, run_id: str) -> None:
        self._run_id = run_id

    def start(self, root_dir: str) -> None:
        if self._queue is not None:
            return
        self._run_id = self._open(root_dir)
        self.spill_path = os.path.join(_local_dir(root_dir), f"{self.name}-{self._run_id}.undelivered.jsonl")
        self._queue = DeliveryQueue(self._send, self.spill_path, self._spill_header(), max_pending=self.max_pending,
                                    name=self.name, linger=self.linger)

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        self._put(Record("params", flatten_params(params)))

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self._put(Record("metrics", dict(metrics), step))

    def log_artifact(self, local_path: str, artifact_path: str | None = None) -> None:
        self._put(Record("artifact", {"local_path": os.fspath(local_path), "artifact_path": artifact_path}))

    def set_tags(self, tags: Mapping[str, str]) -> None:
        self._put(Record("tags", {str(k): str(v) for k, v in tags.items()}))

    def flush(self, timeout: float | None = None) -> bool:
        if self._queue is None:
            return True
        return self._queue.flush(self.flush_timeout if timeout is None else timeout)

    def finalize(self, status: str) -> None:
        if status not in STATUSES:
            raise ValueError(f"finalize(status=...) must be one of {STATUSES}, got {status!r}.")
        if self._queue is None:
            return
        queue, self._queue = self._queue, None
        self.undelivered = queue.close(self.close_timeout, final=Record("status", {"status": status}))
        if self.undelivered:
            import warnings

            warnings.warn(
                f"{self.undelivered} records for {self.name} run {self._run_id} could not be delivered; they are kept "
                f"in {self.spill_path}. Send them when the tracker is back with: python -m tracktrain.loggers.replay "
                f"{self.spill_path}",
                stacklevel=2,
            )
        try:
            self._close(status)
        except Exception as error:  # a tracker that is down cannot be told the run ended: say so, do not crash
            import warnings

            warnings.warn(f"Could not mark {self.name} run {self._run_id} as {status}: {error}", stacklevel=2)

    def _put(self, record: Record) -> None:
        if self._queue is None:
            raise RuntimeError(f"{type(self).__name__} is not started: the Trainer starts it when fit begins.")
        self._queue.put(record)

    def _spill_header(self) -> dict[str, Any]:
        """What `replay` needs to rebuild this logger for the spilled records (no credentials)."""
        return {"logger": f"{type(self).__module__}.{type(self).__qualname__}", "run_id": self._run_id}

    @classmethod
    def for_replay(cls, header: Mapping[str, Any]) -> QueuedLogger:
        """The logger that delivers a spill file's records to the run its header names."""
        raise NotImplementedError(f"{cls.__name__} cannot replay spill files.")

    @abstractmethod
    def _open(self, root_dir: str) -> str: ...

    @abstractmethod
    def _send(self, records: list[Record]) -> None: ...

    @abstractmethod
    def _close(self, status: str) -> None: ...


def flatten_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as `outer/inner` keys; values kept as they are (trackers stringify what they must)."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_params(value, f"{name}/"))
        else:
            flat[name] = value
    return flat


def _local_dir(root_dir: str) -> str:
    """Where spill files go: the run's root when it is local, else the working directory's .tracktrain/."""
    from tracktrain import storage

    return root_dir if storage.is_local(root_dir) else os.path.join(os.getcwd(), ".tracktrain")
