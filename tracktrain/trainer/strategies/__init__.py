"""Strategies: how the Trainer spreads a fit over devices and processes (see `base`)."""

from tracktrain.trainer.strategies.base import ParallelStrategy, SingleDeviceStrategy, Strategy
from tracktrain.trainer.strategies.choice import STRATEGY_NAMES, strategy_for
from tracktrain.trainer.strategies.data_parallel import DataParallelStrategy
from tracktrain.trainer.strategies.ddp import DDPStrategy
from tracktrain.trainer.strategies.fsdp import FSDPStrategy
from tracktrain.trainer.strategies.ft_ddp import FTDDPStrategy
from tracktrain.trainer.strategies.pipeline import PipelineStrategy
from tracktrain.trainer.strategies.tensor_parallel import TensorParallelStrategy
from tracktrain.trainer.strategies.xla import XLAStrategy

__all__ = [
    "STRATEGY_NAMES",
    "DDPStrategy",
    "DataParallelStrategy",
    "FSDPStrategy",
    "FTDDPStrategy",
    "ParallelStrategy",
    "PipelineStrategy",
    "SingleDeviceStrategy",
    "Strategy",
    "TensorParallelStrategy",
    "XLAStrategy",
    "strategy_for",
]
