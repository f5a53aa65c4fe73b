"""Average: the mean of numbers or tensors over updates, as PyTorch-Ignite's (VariableAccumulation-based) Average."""

from __future__ import annotations

import numbers
from typing import Any, cast

import torch

from tracktrain.metrics.distributed import all_reduce_sum, common_shape
from tracktrain.metrics.inputs import accumulation_dtype
from tracktrain.metrics.metric import Metric, NotComputableError

__all__ = ["Average"]


class Average(Metric):
    """Mean of the outputs: numbers, or tensors averaged over samples.

    - a number, or a tensor of 0 or 1 dimensions, is one sample (a 1-dim tensor is one vector sample, as in
      Ignite: to average N scalars at once pass them as shape (N, 1));
    - a tensor of shape (N, ...) with 2 or more dimensions is N samples of shape (...).

    `compute()` returns a float when the samples are scalars, else a tensor of the sample shape (float64, on
    the metric's device). Every sample must have the same shape.

    Args:
        output_transform: picks the value to average from the engine output (a mapping output is an error:
            pick its entry here).
        device: where the sum accumulates (default: the device of the inputs; see `Metric`).
        skip_unrolling: see `Metric`.
    """

    required_output_keys = None
    _state_dict_all_req_keys = ("_sum", "_num_examples", "_sample_shape")

    _sum: torch.Tensor
    _num_examples: int
    _sample_shape: torch.Size | None

    def reset(self) -> None:
        self._unsettle_device()
        self._sum = torch.zeros((), dtype=accumulation_dtype(self._device), device=self._device)
        self._num_examples = 0
        self._sample_shape = None

    def update(self, output: Any) -> None:
        value: torch.Tensor | float
        if isinstance(output, torch.Tensor):
            self._settle_device(output.device)
            value = output.detach().to(self._sum)
            if value.ndim > 1:
                count, value = value.shape[0], value.sum(dim=0)
            else:
                count = 1
            shape = value.shape
        elif isinstance(output, numbers.Number):
            # added as a Python scalar: no host-to-device copy of it; the state stays where it is, for good (a
            # later tensor must not move it by resetting)
            self._settle_device(self._device)
            # float: a Python or NumPy scalar, which adds to a tensor (typeshed gives numbers.Number no arithmetic)
            value, count, shape = cast(float, output), 1, torch.Size()
        else:
            raise TypeError(
                f"Average.update() expects a number or a tensor, got {type(output).__name__}. Pass "
                "output_transform to pick the value to average from the output."
            )
        if self._sample_shape is None:
            self._sample_shape = shape
        elif shape != self._sample_shape:
            raise ValueError(
                f"Average got a sample of shape {tuple(shape)} after samples of shape {tuple(self._sample_shape)}; "
                "every sample must have the same shape (a tensor of 2 or more dimensions is a batch of samples "
                "along its first dimension)."
            )
        # a new tensor rather than +=: the first sample sets the shape of the sum
        self._sum = self._sum + value
        self._num_examples += count

    def compute(self) -> float | torch.Tensor:
        # a process without updates has no sample shape yet: it adds zeros of the shape the others have
        shape = common_shape(self._sample_shape, "Average")
        total: torch.Tensor | None = None
        examples = 0
        if shape is not None:
            local_sum = self._sum if self._sample_shape is not None else self._sum.new_zeros(shape)
            total, examples = all_reduce_sum(local_sum, self._num_examples)
        if total is None or examples == 0:  # total is None only without a shape, hence without examples
            raise NotComputableError(
                "Average must have at least one example before it can be computed; call update() after reset()."
            )
        mean = total / examples
        return mean.item() if mean.ndim == 0 else mean  # host sync for a scalar mean, once per compute()
