"""Ignite's `ignite.handlers.clearml_logger` path: tracktrain does not log to ClearML, and every name here says
what to use (`tracktrain.ignite_names`)."""

from __future__ import annotations

from tracktrain._lazy import lazy_attributes
from tracktrain.ignite_names import tracker_refusal

__all__: list[str] = []

__getattr__, __dir__ = lazy_attributes(__name__, globals(), {}, refused=tracker_refusal(__name__))
