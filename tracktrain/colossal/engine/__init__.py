"""Colossal-AI's `colossalai.engine`: `Engine` (tracktrain's `ModelEngine` with Colossal-AI's gradient
accumulation) and the schedules, `NonPipelineSchedule` and `PipelineSchedule` (tracktrain's)."""

from __future__ import annotations

from tracktrain.colossal.engine.gradient_accumulation import Engine
from tracktrain.colossal.engine.schedule import BaseSchedule, NonPipelineSchedule, PipelineSchedule
from tracktrain.engine.model_engine import BaseOpHook

__all__ = ["BaseOpHook", "BaseSchedule", "Engine", "NonPipelineSchedule", "PipelineSchedule"]
