"""Lightning's `lightning.pytorch.strategies` under its path: the Trainer's strategies by Lightning's names (our
`DDPStrategy`, `FSDPStrategy`, `XLAStrategy`, `SingleDeviceStrategy`, the `Strategy` and `ParallelStrategy` bases),
and ours beside them (`PipelineStrategy`, `TensorParallelStrategy`, `DataParallelStrategy`). The same classes as
`tracktrain.trainer.strategies`: `isinstance(trainer.strategy, ParallelStrategy)` means what it means in Lightning."""

from __future__ import annotations

from tracktrain.trainer.strategies import (
    DataParallelStrategy,
    DDPStrategy,
    FSDPStrategy,
    ParallelStrategy,
    PipelineStrategy,
    SingleDeviceStrategy,
    Strategy,
    TensorParallelStrategy,
    XLAStrategy,
)

__all__ = [
    "DDPStrategy",
    "DataParallelStrategy",
    "FSDPStrategy",
    "ParallelStrategy",
    "PipelineStrategy",
    "SingleDeviceStrategy",
    "Strategy",
    "TensorParallelStrategy",
    "XLAStrategy",
]
