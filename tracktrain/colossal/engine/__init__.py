"""Colossal-AI's `colossalai.engine`: `Engine` (tracktrain's `ModelEngine` with Colossal-AI's gradient
accumulation) and the schedules, `NonPipelineSchedule` and `PipelineSchedule` (tracktrain's)."""

from __future__ import annotations

from tracktrain.colossal.engine.gradient_accumulation import Engine
from tracktrain.engine.model_engine import BaseOpHook
from tracktrain.engine.pipeline import PipelineSchedule
from tracktrain.engine.schedule import BaseSchedule, NonPipelineSchedule

__all__ = ["BaseOpHook", "BaseSchedule", "Engine", "NonPipelineSchedule", "PipelineSchedule"]
