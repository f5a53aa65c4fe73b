"""PSNR (Ignite's `ignite.metrics.psnr`): the peak signal-to-noise ratio of each sample, averaged over samples."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from tracktrain.checks.numeric import is_real
from tracktrain.metrics.distributed import all_reduce_sum
from tracktrain.metrics.inputs import accumulation_dtype, identity, same_shape_and_dtype
from tracktrain.metrics.metric import Metric, NotComputableError

__all__ = ["PSNR"]


class PSNR(Metric):
    """`10 · log10(data_range² / MSE)` of each sample (the MSE over all its elements, + 1e-10), averaged.

    Args:
        data_range: the range of the values (1.0 for images in [0, 1], 255 for 8-bit ones).
        output_transform, device, skip_unrolling: see `Metric`. `y_pred` and `y` have one shape and dtype.
    """

    _state_dict_all_req_keys = ("_sum_of_batchwise_psnr", "_num_examples")
    _sum_of_batchwise_psnr: torch.Tensor
    _num_examples: int

    def __init__(
        self,
        data_range: float,
        output_transform: Callable[[Any], Any] = identity,
        device: str | torch.device | None = None,
        skip_unrolling: bool = False,
    ) -> None:
        if isinstance(data_range, bool) or not is_real(data_range) or data_range <= 0:
            raise ValueError(f"PSNR: data_range must be a positive number (e.g. 1.0 or 255), got {data_range!r}.")
        self.data_range = data_range
        super().__init__(output_transform=output_transform, device=device, skip_unrolling=skip_unrolling)

    def reset(self) -> None:
        self._unsettle_device()
        self._sum_of_batchwise_psnr = torch.zeros((), dtype=accumulation_dtype(self._device), device=self._device)
        self._num_examples = 0

    def update(self, output: Any) -> None:
        y_pred, y = same_shape_and_dtype(output, "PSNR")
        self._settle_device(y_pred.device)
        dtype = self._sum_of_batchwise_psnr.dtype
        dims = tuple(range(1, y.ndim))
        mse = (y_pred.to(dtype) - y.to(dtype)).pow(2).mean(dim=dims)
        psnr = 10.0 * torch.log10(self.data_range**2 / (mse + 1e-10))
        self._sum_of_batchwise_psnr += psnr.sum().to(self._device)
        self._num_examples += y.shape[0]

    def compute(self) -> float:
        total, examples = all_reduce_sum(self._sum_of_batchwise_psnr, self._num_examples)
        if examples == 0:
            raise NotComputableError(
                "PSNR must have at least one example before it can be computed; call update() after reset()."
            )
        return total.item() / examples  # host sync, once per compute()
