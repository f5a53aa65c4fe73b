"""`EpochOutputStore` (Ignite's `ignite.handlers.stores`): every output of an epoch, kept for an epoch-level
computation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tracktrain.engine.engine import Engine
from tracktrain.engine.events import Events

__all__ = ["EpochOutputStore"]


class EpochOutputStore:
    """Keeps `output_transform(engine.state.output)` of each iteration of the current epoch in `data` (emptied at
    each EPOCH_STARTED); with `attach(engine, name)` it is also `engine.state.<name>` at EPOCH_COMPLETED."""

    def __init__(self, output_transform: Callable[[Any], Any] = lambda output: output) -> None:
        if not callable(output_transform):
            raise TypeError(f"EpochOutputStore: output_transform must be callable, got {output_transform!r}.")
        self.data: list[Any] = []
        self.output_transform = output_transform
        self.name: str | None = None

    def reset(self) -> None:
        self.data = []

    def update(self, engine: Engine) -> None:
        self.data.append(self.output_transform(engine.state.output))

    def store(self, engine: Engine) -> None:
        setattr(engine.state, str(self.name), self.data)

    def attach(self, engine: Engine, name: str | None = None) -> None:
        engine.add_event_handler(Events.EPOCH_STARTED, self.reset)
        engine.add_event_handler(Events.ITERATION_COMPLETED, self.update)
        if name:
            self.name = name
            engine.add_event_handler(Events.EPOCH_COMPLETED, self.store)
