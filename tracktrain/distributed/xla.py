"""torch_xla, imported on first use only: the core never depends on it, and says how to install it."""

from __future__ import annotations

import importlib
from typing import Any

import torch

__all__ = ["device_loader", "mark_step", "xla_device", "xla_model"]


def xla_model() -> Any:
    """`torch_xla.core.xla_model`, or a ModuleNotFoundError with the install command."""
    try:
        return importlib.import_module("torch_xla.core.xla_model")
    except ImportError as e:
        raise ModuleNotFoundError(
            "torch_xla cannot be imported, please install PyTorch XLA. The TPU/XLA step needs it: install the "
            "torch_xla release that matches "
            f"your torch ({torch.__version__.split('+')[0]}): pip install 'torch_xla==<your torch version>' (torch_xla "
            "exists only for specific torch versions, e.g. torch==2.9.0 torch_xla==2.9.0); on a CPU host set "
            "PJRT_DEVICE=CPU to try it. scripts/test-xla.sh builds such an environment."
        ) from e


def xla_device() -> Any:
    """The XLA device of this process (`torch_xla.device()`; `xla_device()` before torch_xla 2.7)."""
    xm = xla_model()
    torch_xla = importlib.import_module("torch_xla")
    return torch_xla.device() if hasattr(torch_xla, "device") else xm.xla_device()


def mark_step() -> None:
    """Cut the lazy graph here and run it (`torch_xla.sync()`; `mark_step()` before torch_xla 2.7)."""
    xm = xla_model()
    torch_xla = importlib.import_module("torch_xla")
    (torch_xla.sync if hasattr(torch_xla, "sync") else xm.mark_step)()


def device_loader(loader: Any, device: Any) -> Any:
    """`loader` feeding `device` through torch_xla's `MpDeviceLoader` (which also cuts the graph per batch)."""
    xla_model()  # the install hint, when torch_xla is missing
    return importlib.import_module("torch_xla.distributed.parallel_loader").MpDeviceLoader(loader, device)
