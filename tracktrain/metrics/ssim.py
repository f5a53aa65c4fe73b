"""SSIM (Ignite's `ignite.metrics.ssim`): the structural similarity of each image (2-D, or 3-D volumes), averaged.

Ignite's arithmetic, kept exactly: the images are reflect-padded by half the kernel, the local means and
(co)variances come from one grouped convolution with a Gaussian (or uniform) kernel, and each image's SSIM is the
mean of its SSIM map over channels and positions, the padded border included. (TorchMetrics' SSIM crops that border
instead, so its values differ slightly: this metric does not delegate to it.)
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from tracktrain.checks.numeric import is_real
from tracktrain.metrics.distributed import all_reduce_sum
from tracktrain.metrics.inputs import accumulation_dtype, identity, same_shape_and_dtype
from tracktrain.metrics.metric import Metric, NotComputableError

__all__ = ["SSIM"]


def _per_dimension(value: Any, ndims: int, name: str, kind: type) -> list:
    if isinstance(value, kind) and not isinstance(value, bool):
        return [value] * ndims
    if isinstance(value, Sequence):
        if len(value) != ndims:
            raise ValueError(f"Expected {name} to have length of {ndims}. Got {len(value)}.")
        return list(value)
    what = "int" if kind is numbers.Integral else "float"
    raise ValueError(
        f"Argument {name} should be either {what} or a sequence of {what} of length {ndims}, got {value!r}."
    )


class SSIM(Metric):
    """Structural similarity of `y_pred` and `y`, both (N, C, H, W) (or (N, C, D, H, W) with `ndims=3`).

    Args:
        data_range: the range of the values (1.0 for images in [0, 1], 255 for 8-bit ones).
        kernel_size: the window, odd (one per dimension, or one for all).
        sigma: the Gaussian's standard deviation (one per dimension, or one for all).
        k1, k2: the stabilizing constants, `(k · data_range)²`.
        gaussian: a Gaussian window (default) or a uniform one.
        ndims: 2 (images) or 3 (volumes).
        output_transform, device, skip_unrolling: see `Metric`.
    """

    _state_dict_all_req_keys = ("_sum_of_ssim", "_num_examples")
    _sum_of_ssim: torch.Tensor
    _num_examples: int

    def __init__(
        self,
        data_range: float,
        kernel_size: int | Sequence[int] = 11,
        sigma: float | Sequence[float] = 1.5,
        k1: float = 0.01,
        k2: float = 0.03,
        gaussian: bool = True,
        output_transform: Callable[[Any], Any] = identity,
        device: str | torch.device | None = None,
        skip_unrolling: bool = False,
        ndims: int = 2,
    ) -> None:
        if ndims not in (2, 3):
            raise ValueError(f"Expected ndims to be 2 or 3. Got {ndims}.")
        if isinstance(data_range, bool) or not is_real(data_range) or data_range <= 0:
            raise ValueError(f"SSIM: data_range must be a positive number (e.g. 1.0 or 255), got {data_range!r}.")
        self.kernel_size = _per_dimension(kernel_size, ndims, "kernel_size", numbers.Integral)
        self.sigma = _per_dimension(sigma, ndims, "sigma", float)
        if any(size % 2 == 0 or size <= 0 for size in self.kernel_size):
            raise ValueError(f"Expected kernel_size to have odd positive number. Got {kernel_size}.")
        if any(s <= 0 for s in self.sigma):
            raise ValueError(f"Expected sigma to have positive number. Got {sigma}.")
        self.gaussian = bool(gaussian)
        self.data_range = data_range
        self.c1 = (k1 * data_range) ** 2
        self.c2 = (k2 * data_range) ** 2
        self.ndims = ndims
        super().__init__(output_transform=output_transform, device=device, skip_unrolling=skip_unrolling)
        windows = [
            self._gaussian(size, s) if self.gaussian else self._uniform(size)
            for size, s in zip(self.kernel_size, self.sigma)
        ]
        self._window = torch.einsum("i,j->ij" if ndims == 2 else "i,j,k->ijk", *windows)

    @staticmethod
    def _gaussian(size: int, sigma: float) -> torch.Tensor:
        half = (size - 1) * 0.5
        gauss = torch.exp(-0.5 * (torch.linspace(-half, half, steps=size) / sigma).pow(2))
        return gauss / gauss.sum()

    @staticmethod
    def _uniform(size: int) -> torch.Tensor:
        # Ignite's: 1/5 on (at most) the five middle taps, a box of width 5 in units of the Gaussian's grid
        kernel = torch.zeros(size)
        kernel[max(size // 2 - 2, 0) : min(size // 2 + 3, size)] = 1 / 5.0
        return kernel

    def reset(self) -> None:
        self._unsettle_device()
        self._sum_of_ssim = torch.zeros((), dtype=accumulation_dtype(self._device), device=self._device)
        self._num_examples = 0

    def update(self, output: Any) -> None:
        y_pred, y = same_shape_and_dtype(output, "SSIM")
        if y_pred.ndim - 2 != self.ndims:
            raise ValueError(
                f"Expected y_pred and y to have BxCxHxW or BxCxDxHxW shape. Got y_pred: {y_pred.shape} and y: "
                f"{y.shape} (SSIM(ndims={self.ndims}))."
            )
        self._settle_device(y_pred.device)
        if not y_pred.is_floating_point():
            y_pred, y = y_pred.float(), y.float()
        channels = y_pred.shape[1]
        kernel = self._window.to(device=y_pred.device, dtype=y_pred.dtype).expand(channels, 1, *self._window.shape)
        pads = [(size - 1) // 2 for size in self.kernel_size]
        # F.pad counts from the last dimension: W, then H, then D
        padding = [pad for size in (pads[1], pads[0], *pads[2:]) for pad in (size, size)]
        y_pred, y = F.pad(y_pred, padding, mode="reflect"), F.pad(y, padding, mode="reflect")
        convolve = F.conv3d if self.ndims == 3 else F.conv2d
        stacked = convolve(torch.cat([y_pred, y, y_pred * y_pred, y * y, y_pred * y]), kernel, groups=channels)
        mu_pred, mu_y, pred_sq, y_sq, pred_y = stacked.chunk(5)
        mu_pred_sq, mu_y_sq, mu_pred_y = mu_pred.pow(2), mu_y.pow(2), mu_pred * mu_y
        ssim_map = ((2 * mu_pred_y + self.c1) * (2 * (pred_y - mu_pred_y) + self.c2)) / (
            (mu_pred_sq + mu_y_sq + self.c1) * ((pred_sq - mu_pred_sq) + (y_sq - mu_y_sq) + self.c2)
        )
        dtype = self._sum_of_ssim.dtype if ssim_map.device.type != "mps" else torch.float32
        per_image = torch.mean(ssim_map, list(range(1, 2 + self.ndims)), dtype=dtype)
        self._sum_of_ssim += per_image.sum().to(self._sum_of_ssim)
        self._num_examples += y.shape[0]

    def compute(self) -> float:
        total, examples = all_reduce_sum(self._sum_of_ssim, self._num_examples)
        if examples == 0:
            raise NotComputableError(
                "SSIM must have at least one example before it can be computed; call update() after reset()."
            )
        return total.item() / examples  # host sync, once per compute()
