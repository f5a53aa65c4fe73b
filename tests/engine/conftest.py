from __future__ import annotations

from collections.abc import Callable

import pytest

from tracktrain.engine import Engine, Events

# the events a recorder logs; EXCEPTION_RAISED is left to the tests that expect exceptions
RECORDED = [e for e in Events if e is not Events.EXCEPTION_RAISED]


class Recorder:
    """Logs (event name, epoch, iteration) for every event an engine fires, in order."""

    def __init__(self, engine: Engine) -> None:
        self.trace: list[tuple[str, int, int]] = []
        for event in RECORDED:
            engine.add_event_handler(event, self._record, event.name)

    def _record(self, engine: Engine, name: str) -> None:
        self.trace.append((name, engine.state.epoch, engine.state.iteration))

    def names(self) -> list[str]:
        return [name for name, _, _ in self.trace]


@pytest.fixture
def record() -> Callable[[Engine], Recorder]:
    return Recorder
