"""Loss: the average of a loss function over all samples seen, each batch weighted by its size (Ignite's Loss)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from tracktrain.metrics.distributed import all_reduce_sum
from tracktrain.metrics.inputs import accumulation_dtype, identity
from tracktrain.metrics.metric import Metric, NotComputableError

__all__ = ["Loss"]


class Loss(Metric):
    """Average of `loss_fn(y_pred, y, **kwargs)` over samples: each batch's mean loss weighted by its size.

    Args:
        loss_fn: returns the *mean* loss of a batch as a 0-dim tensor (`torch.nn` losses with the default
            `reduction="mean"`).
        output_transform: turns the engine output into `(y_pred, y)` or `(y_pred, y, kwargs)`, where `kwargs`
            is a dict of extra keyword arguments for `loss_fn`. A mapping output needs the keys "y_pred", "y"
            and "criterion_kwargs", as in Ignite.
        batch_size: the number of samples of a batch, from `y` (default `len`).
        device: where the sum accumulates (default: the device of the inputs; see `Metric`).
        skip_unrolling: see `Metric`.

    `compute()` returns a float.
    """

    required_output_keys = ("y_pred", "y", "criterion_kwargs")
    _state_dict_all_req_keys = ("_sum", "_num_examples")

    _sum: torch.Tensor
    _num_examples: Any  # what batch_size returns: an int with the default `len`

    def __init__(
        self,
        loss_fn: Callable[..., Any],
        output_transform: Callable[[Any], Any] = identity,
        batch_size: Callable[[Any], Any] = len,
        device: str | torch.device | None = None,
        skip_unrolling: bool = False,
    ) -> None:
        if not callable(loss_fn):
            raise TypeError(f"Loss: loss_fn must be callable, got {loss_fn!r}.")
        if not callable(batch_size):
            raise TypeError(f"Loss: batch_size must be callable (e.g. len), got {batch_size!r}.")
        self._loss_fn = loss_fn
        self._batch_size = batch_size
        super().__init__(output_transform=output_transform, device=device, skip_unrolling=skip_unrolling)

    def reset(self) -> None:
        self._unsettle_device()
        self._sum = torch.zeros((), dtype=accumulation_dtype(self._device), device=self._device)
        self._num_examples = 0

    def update(self, output: Any) -> None:
        if not (isinstance(output, Sequence) and len(output) in (2, 3)):
            raise TypeError(
                f"Loss.update() expects (y_pred, y) or (y_pred, y, kwargs), got {type(output).__name__}"
                f"{f' of length {len(output)}' if isinstance(output, Sequence) else ''}. Pass output_transform to "
                "build it from the process function's output."
            )
        y_pred, y = output[0], output[1]
        kwargs = output[2] if len(output) == 3 else {}
        if not isinstance(kwargs, Mapping):
            raise TypeError(f"Loss.update(): the third element must be a dict of loss_fn kwargs, got {kwargs!r}.")
        average_loss = self._loss_fn(y_pred, y, **kwargs)
        if not isinstance(average_loss, torch.Tensor):
            average_loss = torch.as_tensor(average_loss)
        self._settle_device(average_loss.device)
        if average_loss.ndim != 0:
            raise ValueError(
                f"Loss: loss_fn returned a tensor of shape {tuple(average_loss.shape)}; it must return the batch's "
                "average loss as a 0-dim tensor (use reduction='mean', the default of torch.nn losses)."
            )
        n = self._batch_size(y)
        self._sum += average_loss.detach().to(self._sum) * n
        self._num_examples += n

    def compute(self) -> float:
        total, examples = all_reduce_sum(self._sum, self._num_examples)
        if examples == 0:
            raise NotComputableError(
                "Loss must have at least one example before it can be computed; call update() after reset()."
            )
        return total.item() / float(examples)  # host sync, once per compute()
