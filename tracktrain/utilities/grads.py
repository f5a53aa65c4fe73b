"""Lightning's `utilities.grads.grad_norm`: the norm of each parameter's gradient and of all of them together, to
log (`self.log_dict(grad_norm(self, norm_type=2))` in `on_before_optimizer_step`)."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["grad_norm"]


def grad_norm(module: nn.Module, norm_type: float | int | str, group_separator: str = "/") -> dict[str, torch.Tensor]:
    """`{"grad_2.0_norm/<name>": norm, ..., "grad_2.0_norm_total": norm}` over the parameters that have a gradient
    (Lightning's names); the total is the norm of all gradients as one vector. Tensors: read them when logged."""
    norm = float(norm_type)
    if not norm > 0:
        raise ValueError(f"grad_norm(norm_type=...) must be a positive number or 'inf', got {norm_type!r}.")
    norms = {
        f"grad_{norm}_norm{group_separator}{name}": parameter.grad.detach().norm(norm)
        for name, parameter in module.named_parameters()
        if parameter.grad is not None
    }
    if norms:
        norms[f"grad_{norm}_norm_total"] = torch.stack(list(norms.values())).norm(norm)
    return norms
