"""`OneCallAtATime`: a tracker client's requests with a deadline, for a delivery worker that must hear of an outage in
seconds while the client itself would retry for minutes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["OneCallAtATime"]


class OneCallAtATime:
    """Runs a client's calls one at a time on a daemon thread, waiting at most `timeout` seconds for each.

    A call that overruns goes on in the background and its result is dropped; until it ends, the next call fails at
    once, so requests never pile up nor overtake each other. When it ends well, the tracker is back:
    `on_late_success` is called (the delivery cuts its backoff short). Only for requests that are idempotent in the
    tracker (the same metric, parameter, tag or file again changes nothing): a late success of a call counted as
    failed, and sent again, is then harmless.
    """

    def __init__(self, on_late_success: Callable[[], None], what: str = "tracker") -> None:
        self._lock = threading.Lock()
        self._running: _Call | None = None
        self._on_late_success = on_late_success
        self.what = what

    def call(self, timeout: float | None, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            running = self._running
            if running is not None and not running.done.is_set():
                raise TimeoutError(
                    f"the previous {self.what} request ({running.name}) has not returned after "
                    f"{time.monotonic() - running.started:.0f} s"
                )
            call = self._running = _Call(function, args, kwargs)
            threading.Thread(target=call.run, name=f"tracktrain-{self.what.lower()}-request", daemon=True).start()
        if not call.done.wait(timeout):
            call.on_late_success = self._on_late_success
            raise TimeoutError(f"{self.what} request {call.name} did not return within {timeout} s")
        if call.error is not None:
            raise call.error
        return call.result


class _Call:
    def __init__(self, function: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        self.function, self.args, self.kwargs = function, args, kwargs
        self.name = getattr(function, "__name__", repr(function))
        self.started = time.monotonic()
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.on_late_success: Callable[[], None] | None = None  # set when the caller stopped waiting

    def run(self) -> None:
        try:
            self.result = self.function(*self.args, **self.kwargs)
        except BaseException as error:  # handed to the waiting thread
            self.error = error
        finally:
            self.done.set()
        if self.error is None and self.on_late_success is not None:
            self.on_late_success()
