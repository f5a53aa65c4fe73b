"""`XLAStrategy`: an XLA device (TPU, or the CPU with PJRT_DEVICE=CPU) through torch_xla, imported when a fit
starts."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from tracktrain.distributed.xla import device_loader, mark_step, xla_device, xla_model
from tracktrain.trainer.strategies.base import ParallelStrategy

__all__ = ["XLAStrategy"]


class XLAStrategy(ParallelStrategy):
    """Batches reach the device through torch_xla's `MpDeviceLoader` (which also cuts the lazy graph once per
    batch); the optimizer step all-reduces gradients across replicas first (a no-op on one device) and marks the
    step, so clipping sees the reduced gradients."""

    name = "xla"

    def setup_environment(self, device: torch.device) -> torch.device:
        self._xm = xla_model()
        self.device = xla_device()
        return self.device

    def model_engine_options(self, optimizer: torch.optim.Optimizer | None) -> dict[str, Any]:
        xm = self._xm

        def step_and_mark(optimizer: torch.optim.Optimizer) -> None:
            optimizer.step()
            mark_step()

        handlers = [] if optimizer is None else [lambda: xm.reduce_gradients(optimizer)]
        return {"gradient_handlers": handlers, "optimizer_step": step_and_mark}

    def distribute(self, loader: Iterable[Any], shuffle_default: bool, seed: int = 0) -> Iterable[Any]:
        return device_loader(loader, self.device)
