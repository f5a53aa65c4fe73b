"""Delivery from a child process: a `QueuedLogger`'s `_send` runs in `python -m tracktrain.loggers.sender_child`, so
the tracker client's Python work (building entities, encoding requests, writing a store) never holds the training
process's GIL.

The training process keeps its `DeliveryQueue` as it is (linger, retry with backoff, spill, replay); only the queue's
`send` becomes `SenderProcess.send`: hand the batch to the child and wait for its answer. The child rebuilds the logger
with `for_sender(_sender_header())` (by default `for_replay` of the spill header; credentials travel in the
environment, never in a header), sends each batch it receives with the logger's `_send`, and answers with the error,
if any, and the logger's `_sender_report` (what the training process must learn: a run id, refused values). Its
warnings and errors are logged again in the training process, under their own logger names.

A child that dies, fails to start, or falls silent is a failed send like any other: the batch is retried with backoff
and never lost, and the next send starts a new child. A child runs in its own session: a Ctrl-C meant for the training
job does not kill it before it has delivered what the job flushes on its way out. It exits when the training process
tells it to (then it is reaped by its PID), or when the training process dies, however it dies: its input closes, or,
while a batch is in hand, its next heartbeat finds nobody listening and it exits once that batch is delivered (at most
30 s later). After a run, an idle child is kept warm for a minute for the next run of this process (see `keep_warm`).

This module is the training process's end; `sender_child` is the child's, and holds the frames both write: length-
prefixed pickles on the child's stdin and stdout.
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any, Protocol

from tracktrain.loggers.sender_child import read_frame, write_frame

if TYPE_CHECKING:
    from tracktrain.loggers.delivery import Record

__all__ = ["SenderError", "SenderLogger", "SenderProcess"]

CHILD_MODULE = "tracktrain.loggers.sender_child"


class SenderError(Exception):
    """The child could not deliver a batch (the tracker's error, as text), or could not start."""


class SenderLogger(Protocol):
    """What the training process's end needs of the logger whose batches it sends (a `QueuedLogger`, whose module
    imports this one: the class is named here only as this)."""

    def _sender_header(self) -> dict[str, Any]: ...

    def _sender_environment(self) -> dict[str, str]: ...

    def _take_sender_report(self, report: Mapping[str, Any]) -> None: ...

    def _tracker_is_back(self) -> None: ...


# ------------------------------------------------------------------------------------- the training process
class SenderProcess:
    """The training process's end of the pipe: `send` is the `DeliveryQueue`'s send, called from its thread only.

    Args:
        logger: the logger whose `_send` the child runs; it must be rebuildable in another process by
            `type(logger).for_sender(logger._sender_header())`.
        start_timeout: the longest the child may take to import the tracker's library and rebuild the logger.
        silence_timeout: the longest a busy child may go without a word (it sends a heartbeat every second while
            it works, however long a request or an upload takes); past it the child is taken as frozen and killed.
        keep_warm: after `close`, an idle child waits this many seconds for the next logger this process starts
            with the same environment (the next fit of a sweep, a notebook, a benchmark), which then skips the
            seconds of CPU a new child spends importing the tracker's library; then it is ended and reaped. 0: it
            is ended at `close`.
    """

    def __init__(
        self, logger: SenderLogger, start_timeout: float = 120.0, silence_timeout: float = 30.0, keep_warm: float = 60.0
    ) -> None:
        self._logger = logger
        self.start_timeout = start_timeout
        self.silence_timeout = silence_timeout
        self.keep_warm = keep_warm
        self._child: _Child | None = None
        self._lock = threading.Lock()  # `close` (training thread) against `send` (delivery thread)
        self._sending = False
        self._closed = False
        self.children = 0  # children this sender has used: 1 unless one died or froze

    @property
    def pid(self) -> int | None:
        """The PID of the child in use (None before the first send and after `close`)."""
        child = self._child
        return child.process.pid if child is not None else None

    def send(self, records: list[Record]) -> None:
        child = self._child_for_send()
        try:
            child.write(("send", records))
            error, report = child.answer(self.silence_timeout)
        except BaseException:
            child.stop(wait=0.0)  # its state is unknown (half a frame may be in the pipe): the next send starts anew
            raise
        finally:
            with self._lock:
                self._sending = False
                if child.stopped or child.process.poll() is not None:
                    child.stop(wait=0.0)  # reaped
                    if self._child is child:
                        self._child = None
        self._logger._take_sender_report(report)
        if error is not None:
            raise SenderError(error)

    def interrupt(self) -> None:
        """End a send still running (the `DeliveryQueue`'s `close` gives up on it): its child is killed and reaped,
        and the send fails at once."""
        with self._lock:
            child = self._child if self._sending else None
        if child is not None:
            child.stop(wait=0.0)

    def close(self, timeout: float = 5.0) -> None:
        """Done with the child: when it is idle it waits `keep_warm` seconds for another logger; else it is told to
        exit, and killed if it has not after `timeout` seconds (at once when a send is still waiting for it). It is
        reaped either way."""
        with self._lock:
            self._closed = True
            child, self._child = self._child, None
            idle = not self._sending
        if child is None:
            return
        if idle and self.keep_warm > 0 and child.ready and not child.stopped and child.process.poll() is None:
            child.logger = None
            _WARM.keep(child, self.keep_warm)
        else:
            child.stop(wait=timeout if idle else 0.0)

    def _child_for_send(self) -> _Child:
        with self._lock:
            if self._closed:
                raise SenderError("the sender process is closed")
            self._sending = True
            child = self._child
            if child is not None and child.process.poll() is not None:  # it died while idle: reap it, start anew
                child.stop(wait=0.0)
                child = self._child = None
            if child is None:  # in `_child` from the start, so that `close` ends it even while it starts
                environment = _child_environment(self._logger)
                child = self._child = _WARM.take(environment) or _Child(environment)
                self.children += 1
                try:
                    child.attach(self._logger)
                except BaseException:
                    self._sending = False
                    self._child = None
                    child.stop(wait=0.0)
                    raise
        if not child.ready:
            try:
                child.wait_ready(self.start_timeout)
            except BaseException:
                child.stop(wait=0.0)
                with self._lock:
                    self._sending = False
                    if self._child is child:
                        self._child = None
                raise
        return child


class _Child:
    """One child process, the thread that reads what it says, and its answers in arrival order."""

    def __init__(self, environment: dict[str, str]) -> None:
        self.environment = environment
        self.process = subprocess.Popen(
            [sys.executable, "-m", CHILD_MODULE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=environment,
            start_new_session=True,
        )
        assert self.process.stdin is not None and self.process.stdout is not None  # both are pipes (PIPE above)
        self._to_child: IO[bytes] = self.process.stdin
        self._from_child: IO[bytes] = self.process.stdout
        self.logger: SenderLogger | None = None  # whose batches it sends now; its own warnings are relayed anyway
        self.ready = False
        self.stopped = False
        self._answers: queue.Queue[tuple[Any, ...] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="tracktrain-sender-reader", daemon=True)
        self._reader.start()

    def attach(self, logger: SenderLogger) -> None:
        """Have the child rebuild `logger` (from its header: no credentials) and send its batches from now on."""
        self.logger = logger
        self.ready = False
        self.write(("start", {"header": logger._sender_header(), "sys_path": list(sys.path)}))

    def write(self, message: tuple[str, Any]) -> None:
        write_frame(self._to_child, pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            message = self._next(deadline - time.monotonic(), f"was not ready within {timeout:g} s")
            if message[0] == "ready":
                self.ready = True
                return
            if message[0] == "answer":
                raise SenderError(
                    f"the sender process (PID {self.process.pid}) could not rebuild the logger: {message[1]}"
                )

    def answer(self, silence_timeout: float) -> tuple[str | None, dict[str, Any]]:
        while True:
            message = self._next(silence_timeout, f"said nothing for {silence_timeout:g} s while sending")
            if message[0] == "answer":
                return message[1], message[2]

    def _next(self, timeout: float, overdue: str) -> tuple[Any, ...]:
        try:
            message = self._answers.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            self.stop(wait=0.0)
            raise TimeoutError(
                f"the sender process (PID {self.process.pid}) {overdue}; it is killed, and a new one "
                "starts at the next send"
            ) from None
        if message is None:
            code = self.process.wait()
            raise SenderError(f"the sender process (PID {self.process.pid}) exited with code {code}")
        return message

    def ask_to_exit(self) -> None:
        """It exits once idle. Said, not only an end of its input: a process forked from this one (a DataLoader
        worker) holds the pipe open."""
        self.stopped = True
        try:
            self.write(("exit", None))
            self._to_child.close()
        except (OSError, ValueError):  # a broken pipe, or closed already: it is gone, or told
            pass

    def stop(self, wait: float) -> None:
        """Tell it to exit once idle, kill it by its PID if it still runs after `wait` seconds, reap it."""
        self.ask_to_exit()
        if wait > 0:
            try:
                self.process.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                pass
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def _read(self) -> None:
        """What the child says: log records (logged again here), 'the tracker is back' (wakes the delivery from its
        backoff), heartbeats, `ready` and answers (for the waiting send). None when it is gone."""
        stream = self._from_child
        try:
            while (frame := read_frame(stream)) is not None:
                message = pickle.loads(frame)
                kind = message[0]
                if kind == "log":
                    _, name, level, text = message
                    logging.getLogger(name).log(level, text)
                elif kind == "back":
                    logger = self.logger
                    if logger is not None:
                        logger._tracker_is_back()
                elif kind != "beat" or self._answers.empty():  # heartbeats only matter to a waiting send
                    self._answers.put(message)
        except (OSError, ValueError, EOFError, pickle.UnpicklingError):  # the pipe broke: it is gone
            pass
        finally:
            stream.close()
            self._answers.put(None)


class _WarmChildren:
    """Idle children kept for the next loggers of this process: each is taken only by a logger whose child
    environment is the same (credentials included), and ended and reaped after its time, at exit, or when more than
    `limit` wait."""

    def __init__(self, limit: int = 3) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._waiting: list[tuple[_Child, object]] = []  # the oldest first; each stay has its own token
        self._exit_hook = False
        self._pid = os.getpid()

    def keep(self, child: _Child, seconds: float) -> None:
        stay = object()
        with self._lock:
            self._waiting.append((child, stay))
            evicted = self._waiting[: -self.limit]
            del self._waiting[: -self.limit]
            if not self._exit_hook:
                atexit.register(self.end)
                self._exit_hook = True
        for old, _ in evicted:
            old.stop(wait=1.0)
        timer = threading.Timer(seconds, self._expire, args=(child, stay))
        timer.daemon = True
        timer.start()

    def take(self, environment: dict[str, str]) -> _Child | None:
        with self._lock:
            matching = [entry for entry in self._waiting if entry[0].environment == environment]
            if not matching:
                return None
            self._waiting.remove(matching[-1])
        child = matching[-1][0]
        if child.process.poll() is not None:  # ended while it waited (killed from outside)
            child.stop(wait=0.0)
            return None
        return child

    def _expire(self, child: _Child, stay: object) -> None:
        with self._lock:
            if (child, stay) not in self._waiting:
                return  # taken (maybe kept again since, for a stay of its own), or evicted
            self._waiting.remove((child, stay))
        child.stop(wait=5.0)

    def end(self) -> None:
        """At exit: the idle children have nothing in hand; each is told to exit, and killed if it has not within a
        second."""
        if os.getpid() != self._pid:
            return  # a process forked from ours exits: the children are the original process's
        with self._lock:
            children = [child for child, _ in self._waiting]
            self._waiting = []
        for child in children:
            child.ask_to_exit()
        deadline = time.monotonic() + 1.0
        for child in children:
            child.stop(wait=max(deadline - time.monotonic(), 0.0))


_WARM = _WarmChildren()


def _child_environment(logger: SenderLogger) -> dict[str, str]:
    """This process's environment, the logger's additions (credentials), and tracktrain's location in front of
    PYTHONPATH: `python -m tracktrain.loggers.sender_child` must import wherever this process runs from."""
    import tracktrain

    environment = {**os.environ, **logger._sender_environment()}
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(tracktrain.__file__)))
    environment["PYTHONPATH"] = os.pathsep.join(
        [package_root, *filter(None, environment.get("PYTHONPATH", "").split(os.pathsep))]
    )
    return environment
