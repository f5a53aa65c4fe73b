"""Colossal-AI's `colossalai.core`: `global_context`, imported as `gpc` (`from tracktrain.colossal.core import
global_context as gpc`): the loaded config and the ranks of each `ParallelMode`."""

from __future__ import annotations

from tracktrain.colossal.context.parallel_context import global_context

__all__ = ["global_context"]
