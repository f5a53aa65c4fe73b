"""`LRScheduler`'s first path: it is one of Ignite's parameter schedulers, in `tracktrain.handlers.param_scheduler`
(Ignite's `ignite.handlers.param_scheduler`)."""

from __future__ import annotations

from tracktrain.handlers.param_scheduler import LRScheduler

__all__ = ["LRScheduler"]
