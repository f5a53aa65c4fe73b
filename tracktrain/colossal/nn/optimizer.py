"""Colossal-AI's `colossalai.nn.optimizer` where torch's optimizers compute the same update: `FusedSGD` (torch's SGD),
`FusedAdam`, `CPUAdam` and `HybridAdam` (torch's Adam; `adamw_mode=True`, their default, is AdamW's decoupled weight
decay). Colossal-AI's fused CUDA kernels and CPU offload are ways of computing that update, which torch computes here
(with its own fused kernels on CUDA where it has them). `Lamb`, `Lars` and `FusedLAMB` have no torch counterpart and
are refused, naming what to use."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

__all__ = ["CPUAdam", "FusedAdam", "FusedSGD", "HybridAdam"]


class FusedSGD(torch.optim.SGD):
    """SGD with momentum, dampening, weight decay and Nesterov momentum, as torch's."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        momentum: float = 0,
        dampening: float = 0,
        weight_decay: float = 0,
        nesterov: bool = False,
        wd_after_momentum: bool = False,
    ) -> None:
        if wd_after_momentum:
            raise ValueError(
                "FusedSGD(wd_after_momentum=True) is not supported: torch's SGD adds the weight decay to the gradient "
                "before the momentum. Leave wd_after_momentum=False."
            )
        super().__init__(
            params, lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov
        )


class FusedAdam(torch.optim.Adam):
    """Adam; `adamw_mode` (the default) decays the weights decoupled from the gradient, as AdamW."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        adamw_mode: bool = True,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        set_grad_none: bool = True,
    ) -> None:
        _check_adam(type(self).__name__, bias_correction)
        if amsgrad:
            raise RuntimeError("FusedAdam does not support the AMSGrad variant.")  # Colossal-AI's own refusal
        super().__init__(
            params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, decoupled_weight_decay=adamw_mode
        )


class CPUAdam(torch.optim.Adam):
    """Adam for parameters on the CPU (torch's runs wherever the parameters are); `adamw_mode` as `FusedAdam`'s."""

    def __init__(
        self,
        model_params: Iterable[Any],
        lr: float = 1e-3,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        adamw_mode: bool = True,
        nvme_offload_fraction: float = 0.0,
        nvme_offload_dir: str | None = None,
    ) -> None:
        _check_adam(type(self).__name__, bias_correction, nvme_offload_fraction)
        super().__init__(
            model_params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, decoupled_weight_decay=adamw_mode
        )


class HybridAdam(CPUAdam):
    """Adam for parameters on the CPU or a GPU, as `CPUAdam`."""


def _check_adam(name: str, bias_correction: bool, nvme_offload_fraction: float = 0.0) -> None:
    if not bias_correction:
        raise ValueError(f"{name}(bias_correction=False) is not supported: torch's Adam always corrects the bias.")
    if nvme_offload_fraction:
        raise ValueError(
            f"{name}(nvme_offload_fraction={nvme_offload_fraction}) is not supported: tracktrain keeps the optimizer's "
            "state in memory. Leave it at 0.0."
        )


_REFUSED = {
    "Lamb": "LAMB",
    "Lars": "LARS",
    "FusedLAMB": "LAMB",
    "ColossalaiOptimizer": "Colossal-AI's optimizer wrapper",
}


def __getattr__(name: str) -> Any:
    what = _REFUSED.get(name)
    if what is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    raise ImportError(
        f"tracktrain.colossal.nn has no {name}: torch has no {what} optimizer, and tracktrain.colossal maps Colossal-AI's "
        "optimizers only onto torch's of the same update. Use a torch optimizer (torch.optim.AdamW, torch.optim.SGD) "
        "or a LAMB implementation of your own.",
        name=name,
    )
