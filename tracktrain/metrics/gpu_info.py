"""`GpuInfo`: the memory in use and the utilization of each CUDA device, as Ignite's `ignite.metrics.gpu_info`,
read through torch (`torch.cuda.mem_get_info`, `torch.cuda.utilization`) rather than through nvidia-smi."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from tracktrain.engine.engine import Engine
from tracktrain.engine.events import Events
from tracktrain.metrics.metric import Metric

__all__ = ["GpuInfo"]


class GpuInfo(Metric):
    """Writes `engine.state.metrics["gpu:<i> mem(%)"]` and `["gpu:<i> util(%)"]` (integers, as Ignite) for every
    CUDA device, each time its event fires (`attach(engine, name="gpu", event_name=ITERATION_COMPLETED)`).

    Reading the devices is a host call per event (no device sync); the utilization needs the nvidia-ml-py package
    (torch asks NVML), and is left out with a warning once without it. Without CUDA it raises a RuntimeError when
    made, as Ignite's does.
    """

    required_output_keys = None

    def __init__(self) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError(
                "This contrib module requires available GPU: GpuInfo reads the CUDA devices' memory and utilization, "
                "and torch sees none here (torch.cuda.is_available() is False)."
            )
        self._utilization_warned = False
        super().__init__(device="cpu")

    def reset(self) -> None:
        pass

    def update(self, output: Any) -> None:
        pass

    def compute(self) -> list[dict[str, Any]]:
        """One `{"mem(%)": ..., "util(%)": ...}` per device (util left out where NVML is not available)."""
        devices = []
        for index in range(torch.cuda.device_count()):
            free, total = torch.cuda.mem_get_info(index)
            device: dict[str, Any] = {"mem(%)": int((total - free) * 100.0 / total)}
            try:
                device["util(%)"] = int(torch.cuda.utilization(index))
            except (ModuleNotFoundError, RuntimeError) as error:
                if not self._utilization_warned:
                    warnings.warn(f"GpuInfo: no GPU utilization ({error}); pip install nvidia-ml-py", stacklevel=2)
                    self._utilization_warned = True
            devices.append(device)
        return devices

    def completed(self, engine: Engine, name: str) -> None:
        for index, device in enumerate(self.compute()):
            for key, value in device.items():
                engine.state.metrics[f"{name}:{index} {key}"] = value

    def attach(self, engine: Engine, name: str = "gpu", event_name: Any = Events.ITERATION_COMPLETED) -> None:
        """Write the devices' values into `engine.state.metrics` at each `event_name`."""
        engine.add_event_handler(event_name, self.completed, name)
