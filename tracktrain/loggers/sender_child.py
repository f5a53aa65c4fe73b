"""The sender child: `python -m tracktrain.loggers.sender_child`, started by `sender_process.SenderProcess`, sends a
`QueuedLogger`'s batches with the logger's own `_send`, out of the training process.

It reads messages on stdin: ("start", {header, sys_path}) rebuilds the logger with `for_sender(header)` (after
putting the training process's import path first) and answers ("ready",); ("send", records) sends a batch and
answers ("answer", error text or None, the logger's `_sender_report()`); ("exit", None), or the end of its input,
ends it. Meanwhile it says ("beat",) every second while a batch or a logger is in hand, ("log", name, level, text)
for each warning or error logged here (the training process logs it again), and ("back",) when the logger learns
that its tracker answers again. It runs at a lower priority than training (nice 10). When a heartbeat finds the
training process gone, it still delivers the batch in hand (nobody else holds those records any more), for at
most `ORPHAN_GRACE_SECONDS`, and exits.

Only the standard library is imported here: the tracker's library comes with the logger's module.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import pickle
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from tracktrain.loggers.delivery import Record

__all__ = ["ChildLogger", "main", "read_frame", "write_frame"]

HEARTBEAT_SECONDS = 1.0  # how often a busy child says it is alive
ORPHAN_GRACE_SECONDS = 30.0  # how long a child whose training process died may go on with the batch in hand
_LENGTH = struct.Struct(">I")


class ChildLogger(Protocol):
    """What the child does with the logger it rebuilds (a `QueuedLogger`, whose module imports the training
    process's end, `sender_process`, which imports this module: the logger's class is named here only as this)."""

    _on_tracker_back: Callable[[], None] | None

    def _send(self, records: list[Record]) -> None: ...

    def _sender_report(self) -> dict[str, Any]: ...


class _Channel:
    """The child's end of its stdout: whole frames from any thread, and heartbeats while a batch is in hand."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self.busy = False  # a batch or a logger in hand: it may take long, and the training process waits

    def send(self, message: tuple[Any, ...]) -> None:
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            write_frame(self._stream, payload)

    def close(self) -> None:
        """No more frames (a log record or a beat from another thread after this is dropped)."""
        with self._lock:
            self._stream.close()

    def beat_while_busy(self) -> None:
        orphaned_at = None
        while True:
            time.sleep(HEARTBEAT_SECONDS)
            if orphaned_at is not None and time.monotonic() - orphaned_at > ORPHAN_GRACE_SECONDS:
                os._exit(0)  # the batch in hand did not get through in time: nobody is left to retry it
            if self.busy and orphaned_at is None:
                try:
                    self.send(("beat",))
                except ValueError:  # closed: the main loop ended
                    return
                except OSError:  # the training process is gone; the main loop ends after this batch
                    orphaned_at = time.monotonic()


class _ToParent(logging.Handler):
    """Log records of the child, handed to the training process's logging as text."""

    def __init__(self, channel: _Channel) -> None:
        super().__init__(logging.WARNING)
        self._channel = channel

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._channel.send(("log", record.name, record.levelno, self.format(record)))
        except (OSError, ValueError):  # the training process is gone, or the channel closed: nobody to tell
            pass
        except Exception:
            self.handleError(record)


def _take_standard_streams() -> tuple[IO[bytes], IO[bytes]]:
    """The pipes, on file descriptors of their own: stdin then reads /dev/null and stdout writes to stderr, so that
    whatever a library prints cannot break a frame."""
    inbox = os.fdopen(os.dup(0), "rb")
    outbox = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return inbox, outbox


def _rebuild_logger(start: dict[str, Any], on_tracker_back: Callable[[], None]) -> ChildLogger:
    # the training process's import path first: its logger class may live next to its script
    sys.path[:0] = [entry for entry in start["sys_path"] if entry not in sys.path]
    header = start["header"]
    module_name, _, class_name = header["logger"].rpartition(".")
    logger = getattr(importlib.import_module(module_name), class_name).for_sender(header)
    logger._on_tracker_back = on_tracker_back
    return logger


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def main() -> int:
    if hasattr(os, "nice"):
        os.nice(10)  # background work: where CPUs are short, training goes first
    inbox, outbox = _take_standard_streams()
    channel = _Channel(outbox)
    try:
        return _serve(inbox, channel)
    finally:  # the pipes are closed by the child itself, not left to the interpreter's exit (a ResourceWarning)
        inbox.close()
        with contextlib.suppress(OSError):  # the training process is gone: nothing left to flush to
            channel.close()


def _serve(inbox: IO[bytes], channel: _Channel) -> int:
    threading.Thread(target=channel.beat_while_busy, name="heartbeat", daemon=True).start()
    logging.getLogger().addHandler(_ToParent(channel))
    logging.captureWarnings(True)  # the tracker library's warnings reach the training process's logs too
    logger: ChildLogger | None = None
    while (frame := read_frame(inbox)) is not None:
        kind, payload = pickle.loads(frame)
        if kind == "exit":
            break
        channel.busy = True
        if kind == "start":  # a (new) logger to send for
            try:
                logger = _rebuild_logger(payload, lambda: channel.send(("back",)))
            except Exception as error:
                channel.send(("answer", _describe(error), {}))
                return 1
            channel.send(("ready",))
        else:
            assert logger is not None  # the training process starts a logger before it sends batches
            failed: str | None = None
            try:
                logger._send(payload)
            except Exception as failure:  # the tracker's error: the training process retries the batch
                failed = _describe(failure)
            channel.send(("answer", failed, logger._sender_report()))
        channel.busy = False
    return 0


# ---------------------------------------------------------------------------------------------- the frames
def write_frame(stream: IO[bytes], payload: bytes) -> None:
    stream.write(_LENGTH.pack(len(payload)) + payload)
    stream.flush()


def read_frame(stream: IO[bytes]) -> bytes | None:
    """The next frame, or None at the end of the stream (a frame cut short counts as the end)."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (length,) = _LENGTH.unpack(head)
    payload = stream.read(length)
    return payload if len(payload) == length else None


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # the training process is gone
        os._exit(0)
