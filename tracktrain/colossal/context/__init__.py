"""Colossal-AI's `colossalai.context`: `Config`, `ConfigException`, `ParallelMode`, and the `ParallelContext` behind
`gpc` (`tracktrain.colossal.core.global_context`)."""

from __future__ import annotations

from tracktrain.colossal.context.config import Config, ConfigException
from tracktrain.colossal.context.parallel_context import ParallelContext
from tracktrain.colossal.context.parallel_mode import ParallelMode

__all__ = ["Config", "ConfigException", "ParallelContext", "ParallelMode"]
