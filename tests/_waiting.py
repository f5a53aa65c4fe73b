"""`eventually`: wait for a condition with a liveness bound (a deadline that only a hang reaches, never a
measurement), for tests whose code under test works in a background thread or process."""

from __future__ import annotations

import time
from collections.abc import Callable


def eventually(condition: Callable[[], object], timeout: float) -> bool:
    """Whether `condition()` became true within `timeout` seconds (polled every 50 ms)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
