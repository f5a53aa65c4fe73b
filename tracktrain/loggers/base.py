"""The `Logger` protocol every tracker implements (one lifecycle: resume, start, log, flush / persist, finalize; a
group of them is driven by `runs.TrackerRuns`), and `QueuedLogger`, the base that makes delivery non-blocking:
`log_*` only queue records; the one generic delivery worker, a `DeliveryQueue`, sends them from a background thread
(batching, retry with backoff, the outage buffer and its spill file), through the tracker's client in this process or
in a child process (`delivery="process"`, see `sender_process`)."""

from __future__ import annotations

import os
import time
import uuid
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tracktrain.checks.environment import positive_setting
from tracktrain.loggers.delivery import DeliveryQueue, Record
from tracktrain.params import flatten_params  # part of this module's interface too

if TYPE_CHECKING:
    from tracktrain.loggers.sender_process import SenderProcess

__all__ = [
    "CHECKPOINT_ARTIFACTS",
    "CLOSE_TIMEOUT",
    "CLOSE_TIMEOUT_VARIABLE",
    "Logger",
    "QueuedLogger",
    "default_close_timeout",
    "default_run_name",
    "flatten_params",
]

# The artifact path of the checkpoints a run announces (`log_checkpoints`). One retention deleted before its upload
# is skipped without a word: retention decided it was not worth keeping.
CHECKPOINT_ARTIFACTS = "checkpoints"

STATUSES = ("FINISHED", "FAILED", "KILLED")
#: how long, at most, the end of a run waits for a tracker to take what is still queued (`close_timeout`), unless
#: the CLOSE_TIMEOUT_VARIABLE environment variable or the logger's `close_timeout=` says otherwise; what it has not
#: taken by then stays in the spill file, for `python -m tracktrain.loggers.replay` when the tracker is back
CLOSE_TIMEOUT = 10.0
CLOSE_TIMEOUT_VARIABLE = "TRACKTRAIN_TRACKER_CLOSE_TIMEOUT"


def default_close_timeout() -> float:
    """`close_timeout` when a logger is given none: TRACKTRAIN_TRACKER_CLOSE_TIMEOUT seconds, else `CLOSE_TIMEOUT`."""
    return positive_setting(CLOSE_TIMEOUT_VARIABLE, CLOSE_TIMEOUT, float, "seconds")


DELIVERIES = ("thread", "process")


class Logger(ABC):
    """What the Trainer needs from a tracker. Every method is called on rank 0 only, from the training thread,
    and must return quickly. `run_id` is saved in checkpoints; `resume(run_id)` before `start` continues that run.

    It is also Lightning's logger, as programs use it through `trainer.logger` and `self.logger`: `name`, `version`,
    `save_dir`, `log_dir`, `experiment` (the tracker's own object: an MLflow client, a W&B run, a TensorBoard
    `SummaryWriter`), `log_hyperparams`, `log_metrics`, `log_graph`, `save`, `after_save_checkpoint`.
    """

    #: which tracker this is ("mlflow", "wandb", ...): it keys the run ids a checkpoint saves and names spill files,
    #: so one Trainer has one logger of each
    tracker: str = "logger"
    log_checkpoints: bool = False  # whether the Trainer announces each checkpoint it commits (`log_artifact`)
    group_separator = "/"  # Lightning's: what joins a metric's group and name

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("name")
        if isinstance(name, str) and "tracker" not in cls.__dict__:  # tracktrain's earlier spelling of `tracker`
            cls.tracker = name

    @property
    @abstractmethod
    def run_id(self) -> str | None: ...

    # ------------------------------------------------------------------------------------- Lightning's surface
    @property
    def name(self) -> str | None:
        """The experiment's name (Lightning's): where the tracker keeps the run."""
        return self.tracker

    @property
    def version(self) -> int | str | None:
        """The run's version (Lightning's): its id."""
        return self.run_id

    #: Lightning's: where the logger writes its files, and the run's own folder (None: it keeps none); a logger
    #: sets them, or makes them properties
    save_dir: str | None = None
    log_dir: str | None = None

    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """Record the model's graph where the tracker can (TensorBoard's); `input_array` defaults to the module's
        `example_input_array`."""

    def save(self) -> None:
        """Write what is buffered (Lightning's); the Trainer also asks at each epoch's end (`flush`)."""

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """Called after a checkpoint is saved (Lightning's hook); the Trainer announces committed checkpoints to
        the loggers that keep them (`log_checkpoints`)."""

    def resume(self, run_id: str) -> None:
        """Continue the run `run_id` (from a checkpoint) instead of starting a new one; before `start`."""

    @abstractmethod
    def start(self, root_dir: str) -> None:
        """Open the run (new, or the one given to `resume`); `root_dir` is the Trainer's default_root_dir."""

    @abstractmethod
    def log_hyperparams(self, params: Mapping[str, Any]) -> None: ...

    @abstractmethod
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...

    def log_artifact(self, local_path: str, artifact_path: str | None = None, step: int | None = None) -> None:
        """Upload a file (a checkpoint, a config); trackers without artifacts ignore it. `step`: the global step
        the file belongs to (a checkpoint's), which may be older than the step being logged: a checkpoint written
        in the background is announced from the checkpoint writer's thread, right after its commit."""

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Tag the run; trackers without tags ignore it."""

    def flush(self, timeout: float | None = None) -> bool:
        """Deliver what is queued, waiting at most `timeout` seconds; whether all of it was."""
        return True

    def persist(self) -> None:
        """Make what is logged so far survive a kill of this process (on disk or delivered), quickly: called before
        each checkpoint commits, since a run resumed from it never logs these steps again."""

    def watch_module(self, module: Any) -> None:
        """Follow `module` (gradients, parameters) where the tracker can, e.g. W&B's watch; after `start`."""

    def log_final_model(self, module: Any) -> None:
        """Keep the trained `module` in the run where the tracker can (MLflow's log_model); once, when a fit ends
        well, before `finalize`."""

    @abstractmethod
    def finalize(self, status: str) -> None:
        """End the run with `status` ("FINISHED", "FAILED" or "KILLED"), delivering what is queued first."""


class QueuedLogger(Logger):
    """A Logger whose records travel through a `DeliveryQueue`: subclasses implement `_open` (create or resume
    the run, return its id), `_send` (deliver a batch with the tracker's batch API, raising on failure) and
    `_close` (mark the run ended).

    With `delivery="process"`, `_send` runs in a child process (`tracktrain.loggers.sender_child`), in a logger the
    child rebuilds with `for_sender(_sender_header())` (by default `for_replay(_spill_header())`): the tracker
    client's Python work then never holds this process's GIL. `_open` and `_close` stay here. What the child learns
    that this process needs (a run id, refused values) goes from its `_sender_report` to this process's
    `_take_sender_report`; `_sender_environment` gives the child what must not be in a header (credentials).

    Args:
        flush_timeout: how long `flush` (at every log interval and epoch end) may wait for the tracker; it never
            waits longer, whatever the tracker does.
        close_timeout: the longest the end of the run (`finalize`) waits for the tracker to take the records still
            queued (None: `default_close_timeout()`, 10 s unless TRACKTRAIN_TRACKER_CLOSE_TIMEOUT says); the rest stay in the spill file, with the run's end status, and
            are sent by `python -m tracktrain.loggers.replay SPILL_FILE` (the warning names it).
        max_pending: records kept in memory while the tracker is unreachable before spilling to disk.
        linger: how long records may gather into one batch before they are sent (see `DeliveryQueue`). What is
            still gathering when the run ends is sent then, and `finalize` waits for it: a shorter linger makes the
            end of a fit quicker, a longer one makes fewer, larger requests.
        delivery: "thread": the background thread calls the tracker's client in this process; "process": it hands
            each batch to a child process that does (a child that dies is started again, its batch retried).
    """

    # delivery="process": the longest a busy child may go without a heartbeat before it is taken as frozen and
    # replaced, and how long an idle child waits for the next run of this process (see `SenderProcess`)
    sender_silence_timeout = 30.0
    sender_keep_warm = 60.0

    def __init__(
        self,
        flush_timeout: float = 0.0,
        close_timeout: float | None = None,
        max_pending: int = 10_000,
        linger: float = 0.2,
        delivery: str = "thread",
    ) -> None:
        if delivery not in DELIVERIES:
            raise ValueError(f"{type(self).__name__}(delivery=...) must be one of {DELIVERIES}, got {delivery!r}.")
        if delivery == "process":
            _check_rebuildable(type(self))
        self.delivery = delivery
        self.linger = linger
        self.flush_timeout = flush_timeout
        self.close_timeout = default_close_timeout() if close_timeout is None else close_timeout
        self.max_pending = max_pending
        self._run_id: str | None = None
        self._queue: DeliveryQueue | None = None
        self.spill_path: str | None = None
        self.undelivered = 0
        self.lost = 0  # records the delivery lost (a bug, reported when it happens): see `DeliveryQueue.lost`
        self._sender: SenderProcess | None = None  # with delivery="process"
        self._on_tracker_back: Callable[[], None] | None = None

    @property
    def run_id(self) -> str | None:
        return self._run_id

    def resume(self, run_id: str) -> None:
        self._run_id = run_id

    def start(self, root_dir: str) -> None:
        if self._queue is not None:
            return
        from tracktrain import storage  # fsspec: not at `import tracktrain`

        self._run_id = self._open(root_dir)
        self.spill_path = os.path.join(storage.local_dir(root_dir), f"{self.tracker}-{self._run_id}.undelivered.jsonl")
        send, interrupt = self._send, None
        if self.delivery == "process":
            from tracktrain.loggers.sender_process import SenderProcess

            # started by the first send, from the delivery thread: training does not wait for it
            self._sender = SenderProcess(
                self, silence_timeout=self.sender_silence_timeout, keep_warm=self.sender_keep_warm
            )
            send, interrupt = self._sender.send, self._sender.interrupt
        self._queue = DeliveryQueue(
            send,
            self.spill_path,
            self._spill_header(),
            max_pending=self.max_pending,
            name=self.tracker,
            linger=self.linger,
            interrupt=interrupt,
        )
        self._on_tracker_back = self._queue.wake

    @property
    def sender_pid(self) -> int | None:
        """With delivery="process": the PID of the child process that sends, once the first batch started it."""
        return self._sender.pid if self._sender is not None else None

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        self._put(Record("params", flatten_params(params)))

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self._put(Record("metrics", dict(metrics), step))

    def log_artifact(self, local_path: str, artifact_path: str | None = None, step: int | None = None) -> None:
        self._put(Record("artifact", {"local_path": os.fspath(local_path), "artifact_path": artifact_path}, step))

    def set_tags(self, tags: Mapping[str, str]) -> None:
        self._put(Record("tags", {str(k): str(v) for k, v in tags.items()}))

    def persist(self) -> None:
        """Spill what is still queued to disk (called before each checkpoint commits; see `DeliveryQueue.persist`)."""
        if self._queue is not None:
            self._queue.persist()

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
        self.lost = queue.lost
        if self._sender is not None:  # whatever it still had in hand is in the spill file now
            self._sender.close()
        if self.undelivered:
            warnings.warn(
                f"{self.undelivered} records for {self.tracker} run {self._run_id} could not be delivered within "
                f"close_timeout ({self.close_timeout:g} s); they are kept in {self.spill_path}, with the run's end "
                f"({status}). Send them when the tracker is back with: python -m tracktrain.loggers.replay "
                f"{self.spill_path}",
                stacklevel=2,
            )
        if self.lost:
            warnings.warn(
                f"{self.lost} records for {self.tracker} run {self._run_id} were lost in delivery: neither "
                "delivered nor kept to be sent later. This is a bug in tracktrain; please report it.",
                stacklevel=2,
            )
        try:
            self._close(status)
        except Exception as error:  # a tracker that is down cannot be told the run ended: say so, do not crash
            warnings.warn(f"Could not mark {self.tracker} run {self._run_id} as {status}: {error}", stacklevel=2)

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

    def _sender_header(self) -> dict[str, Any]:
        """What a sender child needs to rebuild this logger with `for_sender` (no credentials)."""
        return self._spill_header()

    @classmethod
    def for_sender(cls, header: Mapping[str, Any]) -> QueuedLogger:
        """The logger a sender child sends with (delivery="process"); by default the replay's logger."""
        return cls.for_replay(header)

    def _tracker_is_back(self) -> None:
        """Cut the delivery's backoff short: the tracker has just answered (e.g. a request that had overrun got
        through). In a sender child, this tells the training process."""
        if self._on_tracker_back is not None:
            self._on_tracker_back()

    def _sender_environment(self) -> dict[str, str]:
        """Environment variables the sender child needs besides this process's (e.g. credentials, which no header
        may hold)."""
        return {}

    def _sender_report(self) -> dict[str, Any]:
        """In the sender child, after each batch: what the training process must learn (plain, picklable data)."""
        return {}

    def _take_sender_report(self, report: Mapping[str, Any]) -> None:
        """In the training process: take in what the child's `_sender_report` returned."""

    @abstractmethod
    def _open(self, root_dir: str) -> str: ...

    @abstractmethod
    def _send(self, records: list[Record]) -> None: ...

    @abstractmethod
    def _close(self, status: str) -> None: ...


def default_run_name(prefix: str) -> str:
    """A run name that tells runs apart: `<prefix>-<local date and time>-<6 hex>`. (Trackers' own name generators
    draw from Python's `random`, which a seeded run has set: every run of a seed got the same name.)"""
    return f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def _check_rebuildable(logger_class: type[QueuedLogger]) -> None:
    """A sender child imports the logger's class by its module's name and rebuilds the logger with `for_sender`
    (by default `for_replay`): the module must be importable there, and one of the two implemented."""
    name = logger_class.__qualname__
    if logger_class.__module__ == "__main__":
        raise ValueError(
            f"{name}(delivery='process') sends from a child process, which imports the logger's class by "
            f"its module, and {name} is defined in __main__. Move it into a module, or pass "
            "delivery='thread'."
        )
    inherited = [
        getattr(getattr(logger_class, method), "__func__", None) is getattr(QueuedLogger, method).__func__
        for method in ("for_sender", "for_replay")
    ]
    if all(inherited):
        raise ValueError(
            f"{name}(delivery='process') sends from a child process, which rebuilds the logger with "
            f"{name}.for_sender(header) (by default for_replay): implement one (see QueuedLogger), or "
            "pass delivery='thread'."
        )
