"""Colossal-AI's `colossalai.engine.schedule`: `NonPipelineSchedule` (the whole batch through the whole model) and
`PipelineSchedule`, tracktrain's (`initialize` builds it from the config's `parallel.pipeline`; its arguments are
tracktrain's: the stages and the number of micro-batches)."""

from __future__ import annotations

from tracktrain.engine.pipeline import PipelineSchedule
from tracktrain.engine.schedule import BaseSchedule, NonPipelineSchedule

__all__ = ["BaseSchedule", "NonPipelineSchedule", "PipelineSchedule"]
