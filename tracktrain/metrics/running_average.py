"""RunningAverage: an exponential moving average of a metric or of the engine output (PyTorch-Ignite's).

    value_1 = x_1;  value_t = alpha * value_{t-1} + (1 - alpha) * x_t

Attached with its default usage (RunningBatchWise) it resets once on STARTED, and on every ITERATION_COMPLETED
updates and writes `engine.state.metrics[name]`.

What differs from Ignite, on purpose, so that an iteration never waits for the device:

- averaging the output (`output_transform=`), the running value stays a tensor on the output's device (or on
  `device=` when given; Ignite copies it to the CPU) and is written into `state.metrics` as that 0-dim tensor,
  not as a Python float: `float(engine.state.metrics[name])` reads it when you log it. Half-precision outputs
  are averaged in float32.
- under torch.distributed the output is averaged over ranks each update as in Ignite (one all-reduce), but it
  stays a tensor on NCCL.

Averaging a metric (`src=`) still reads a value back each update, because `src.compute()` returns a float.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any, cast

import torch

from tracktrain.checks.numeric import is_real
from tracktrain.engine.engine import Engine
from tracktrain.engine.events import Events
from tracktrain.metrics.distributed import all_reduce_sum, process_count
from tracktrain.metrics.inputs import as_device, identity
from tracktrain.metrics.metric import Metric, NotComputableError
from tracktrain.metrics.usage import MetricUsage, RunningBatchWise, SingleEpochRunningBatchWise, as_usage

__all__ = ["RunningAverage"]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


class RunningAverage(Metric):
    """Exponential moving average of `src`'s value (computed and reset every update) or of the output.

    Args:
        src: the metric to average; it is updated on every ITERATION_COMPLETED, and each RunningAverage update
            computes it and resets it. Give either `src` or `output_transform`.
        alpha: weight of the past, in (0, 1].
        output_transform: picks the value to average (a number or a tensor) from the engine output.
        epoch_bound: overrides the usage given to `attach`: True resets every epoch
            (SingleEpochRunningBatchWise), False runs across epochs (RunningBatchWise). None (default) leaves
            the usage as given.
        device: where the running value of the output lives (default: the output's own device). Must be None
            with `src`.
        skip_unrolling: see `Metric`.
    """

    required_output_keys = None
    _state_dict_all_req_keys = ("_value", "src")

    _value: torch.Tensor | float | None

    def __init__(
        self,
        src: Metric | None = None,
        alpha: float = 0.98,
        output_transform: Callable[[Any], Any] | None = None,
        epoch_bound: bool | None = None,
        device: str | torch.device | None = None,
        skip_unrolling: bool = False,
    ) -> None:
        if not (src is None or isinstance(src, Metric)):
            raise TypeError(f"Argument src should be a Metric or None. RunningAverage got src={src!r}.")
        if not (is_real(alpha) and 0.0 < alpha <= 1.0):
            raise ValueError(
                f"Argument alpha should be a float between 0.0 and 1.0. RunningAverage got alpha={alpha!r} (the "
                "weight of the newest value, in (0, 1])."
            )
        if epoch_bound not in (None, True, False):
            raise TypeError(f"RunningAverage: epoch_bound must be None, True or False, got {epoch_bound!r}.")
        self._value_device: torch.device | None = None
        accumulation_device: str | torch.device | None
        if src is not None:
            if output_transform is not None:
                raise ValueError(
                    "Argument output_transform should be None if src is a Metric. RunningAverage(src=...) averages "
                    "the metric's values: give the output_transform to the src metric instead."
                )
            if device is not None:
                raise ValueError(
                    "Argument device should be None if src is a Metric. RunningAverage(src=...) takes its device "
                    f"from src: create src on {device!r} instead."
                )
            output_transform, accumulation_device = identity, src._requested_device
        else:
            if output_transform is None:
                raise ValueError(
                    "Argument output_transform should not be None if src corresponds to the output of process "
                    "function. RunningAverage needs src (a Metric to average) or output_transform (which picks the "
                    "value from the engine output), e.g. RunningAverage(output_transform=lambda loss: loss)."
                )
            if device is not None:
                self._value_device = as_device(device, "RunningAverage")
            accumulation_device = device
        self.src = src
        self.alpha = float(alpha)
        self.epoch_bound = epoch_bound
        super().__init__(output_transform=output_transform, device=accumulation_device, skip_unrolling=skip_unrolling)

    def reset(self) -> None:
        self._value = None
        if self.src is not None:
            self.src.reset()

    def update(self, output: Any) -> None:
        """Average in `src.compute()` (then reset src), or `output` when there is no src."""
        if self.src is not None:
            value = self.src.compute()
            self.src.reset()
        else:
            value = self._output_value(output)
        if self._value is None:
            self._value = value
        else:
            self._value = self._value * self.alpha + (1.0 - self.alpha) * value

    def _output_value(self, output: Any) -> torch.Tensor | float:
        value: torch.Tensor | float
        if isinstance(output, torch.Tensor):
            # a copy: the running value must not change when the caller reuses its output tensor
            value = output.detach().to(device=self._value_device, copy=True)
            if value.dtype in _LOW_PRECISION:
                value = value.float()
        elif isinstance(output, numbers.Number):
            # float: a Python or NumPy scalar, which mixes with tensors (typeshed gives numbers.Number no arithmetic)
            value = cast(float, output)
        else:
            raise TypeError(
                f"RunningAverage averages a number or a tensor, got {type(output).__name__}; make output_transform "
                "return one."
            )
        world_size = process_count()
        if world_size > 1:
            value = all_reduce_sum(value)[0] / world_size
        return value

    def compute(self) -> torch.Tensor | float:
        if self._value is None:
            raise NotComputableError(
                "RunningAverage has no value before its first update(); call update() after reset()."
            )
        return self._value

    # ------------------------------------------------------------------------------------------ engine handlers
    @torch.no_grad()
    def iteration_completed(self, engine: Engine) -> None:
        if self.src is not None:
            self.update(None)  # the value comes from src, which the engine updates itself
        else:
            super().iteration_completed(engine)

    def completed(self, engine: Engine, name: str) -> None:
        # as computed, without Ignite's .item(): a tensor stays on its device (no sync per iteration)
        engine.state.metrics[name] = self.compute()

    def _usage(self, usage: str | MetricUsage) -> MetricUsage:
        if self.epoch_bound is not None:
            return SingleEpochRunningBatchWise() if self.epoch_bound else RunningBatchWise()
        return as_usage(usage)

    def attach(self, engine: Engine, name: str, usage: str | MetricUsage = RunningBatchWise()) -> None:
        """As Metric.attach, with RunningBatchWise by default; src (if any) is updated on every
        ITERATION_COMPLETED whatever the usage."""
        src = self.src
        if src is not None and not engine.has_event_handler(src.iteration_completed, Events.ITERATION_COMPLETED):
            engine.add_event_handler(Events.ITERATION_COMPLETED, src.iteration_completed)
        super().attach(engine, name, self._usage(usage))

    def detach(self, engine: Engine, usage: str | MetricUsage = RunningBatchWise()) -> None:
        src = self.src
        if src is not None and engine.has_event_handler(src.iteration_completed, Events.ITERATION_COMPLETED):
            engine.remove_event_handler(src.iteration_completed, Events.ITERATION_COMPLETED)
        super().detach(engine, self._usage(usage))

    def is_attached(self, engine: Engine, usage: str | MetricUsage = RunningBatchWise()) -> bool:
        return super().is_attached(engine, self._usage(usage))
