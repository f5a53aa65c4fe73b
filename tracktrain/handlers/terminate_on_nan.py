"""`TerminateOnNan`: stop the run at the first iteration whose output holds a NaN or an infinity."""

from __future__ import annotations

import cmath
import logging
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from tracktrain.engine.engine import Engine

__all__ = ["TerminateOnNan"]


class TerminateOnNan:
    """On ITERATION_COMPLETED, terminates the engine if `output_transform(engine.state.output)` is not finite.

    The output may be a number, a tensor, or tuples/lists/dicts of them, nested (strings and other objects
    are ignored). A NaN or infinity anywhere logs a warning naming the iteration, the epoch and the output,
    then calls `engine.terminate()`: the run ends after this iteration with TERMINATE and COMPLETED.

    Deciding needs the values on the host, so this costs one host-device sync per iteration (see
    `_all_finite`); attach it with `Events.ITERATION_COMPLETED(every=n)` to pay that only every n iterations.

    .. code-block:: python

        trainer.add_event_handler(Events.ITERATION_COMPLETED, TerminateOnNan())
        # a process function returning {"loss": ..., "y_pred": ...}: check the loss only
        trainer.add_event_handler(Events.ITERATION_COMPLETED, TerminateOnNan(lambda out: out["loss"]))
    """

    def __init__(self, output_transform: Callable[[Any], Any] = lambda x: x) -> None:
        if not callable(output_transform):
            raise TypeError(
                f"Argument output_transform should be a function of the engine's output, got {output_transform!r}."
            )
        self._output_transform = output_transform
        self.logger = logging.getLogger(f"{__name__}.{type(self).__name__}")

    def __call__(self, engine: Engine) -> None:
        output = self._output_transform(engine.state.output)
        if _all_finite(output):
            return
        self.logger.warning(
            "%s: NaN or Inf encountered at iteration %d (epoch %d). Output value: %s. Stop training.",
            type(self).__name__,
            engine.state.iteration,
            engine.state.epoch,
            output,
        )
        engine.terminate()


def _all_finite(output: Any) -> bool:
    """Whether every number and tensor in `output` (searched through sequences and mappings) is finite.

    Python numbers are checked on the host. Each tensor's check stays on its device, and the per-tensor
    flags are combined into one flag per device before reading it: this `bool()` is the host-device sync,
    once per iteration (once per device when the output spans devices), however many tensors there are.
    """
    tensors: list[torch.Tensor] = []
    if not _collect(output, tensors):
        return False
    if not tensors:
        return True
    flags_by_device: dict[torch.device, list[torch.Tensor]] = {}
    for tensor in tensors:
        flags_by_device.setdefault(tensor.device, []).append(torch.isfinite(tensor).all())
    return all(bool(torch.stack(flags).all()) for flags in flags_by_device.values())  # sync point


def _collect(value: Any, tensors: list[torch.Tensor]) -> bool:
    """Append the tensors in `value` to `tensors`; return False as soon as a non-finite Python number is seen."""
    if isinstance(value, torch.Tensor):
        tensors.append(value.detach())
        return True
    if isinstance(value, numbers.Number):
        return _finite_number(value)
    if isinstance(value, (str, bytes)):
        return True
    if isinstance(value, Mapping):
        return all(_collect(item, tensors) for item in value.values())
    if isinstance(value, Sequence):
        return all(_collect(item, tensors) for item in value)
    return True


def _finite_number(value: numbers.Number) -> bool:
    try:
        return cmath.isfinite(value)  # type: ignore[arg-type]  # ints, floats, complex, numpy scalars, Decimal
    except (TypeError, ValueError, OverflowError):  # e.g. an int too big for a float: finite all the same
        return True
