"""The strategy a `Trainer(strategy=...)` argument names."""

from __future__ import annotations

from typing import Any

from tracktrain.trainer.strategies.base import SingleDeviceStrategy, Strategy
from tracktrain.trainer.strategies.ddp import DDPStrategy
from tracktrain.trainer.strategies.fsdp import FSDPStrategy
from tracktrain.trainer.strategies.ft_ddp import FTDDPStrategy
from tracktrain.trainer.strategies.pipeline import PipelineStrategy
from tracktrain.trainer.strategies.xla import XLAStrategy

__all__ = ["STRATEGY_NAMES", "strategy_for"]

_BY_NAME: dict[str, type[Strategy]] = {
    "auto": SingleDeviceStrategy,
    "single_device": SingleDeviceStrategy,
    "ddp": DDPStrategy,
    "fsdp": FSDPStrategy,
    "ft_ddp": FTDDPStrategy,  # torchft replica groups at a lighthouse (tracktrain[ft]; torchft imported at fit start)
    "pipeline": PipelineStrategy,  # a PipelineModule's stages, 4 micro-batches, 1F1B
    "xla": XLAStrategy,
}
STRATEGY_NAMES = tuple(_BY_NAME)
"""The names `Trainer(strategy=...)` takes ("auto", "single_device", "ddp", "fsdp", ...); a strategy with options is
given as an instance instead (`FSDPStrategy(auto_wrap=[Block])`)."""


def strategy_for(strategy: Any) -> Strategy:
    """A `Strategy` as given, or a new one of the kind a name says ("auto", "single_device", "ddp", "fsdp",
    "ft_ddp", "pipeline", "xla")."""
    if isinstance(strategy, Strategy):
        return strategy
    if isinstance(strategy, str) and strategy in _BY_NAME:
        return _BY_NAME[strategy]()
    raise ValueError(
        f"Trainer(strategy=...) must be one of {list(_BY_NAME)} or a tracktrain.trainer.strategies.Strategy "
        f"(e.g. DDPStrategy(find_unused_parameters=True)), got {strategy!r}."
    )
