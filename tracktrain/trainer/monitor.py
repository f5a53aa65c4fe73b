"""Reading a monitored metric (for checkpoints, early stopping, plateau schedulers) from the logged values."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["monitored_value"]


def monitored_value(metrics: Mapping[str, Any], name: str, owner: str) -> float:
    """`metrics[name]` as a float (a host sync: call it once per decision); a KeyError naming the metric and the
    ones that were logged when it is missing."""
    if name not in metrics:
        raise KeyError(
            f"{owner} monitors {name!r}, which was never logged. Logged metrics: {sorted(metrics)}. Log it with "
            f"self.log({name!r}, value), or monitor one of those."
        )
    value = metrics[name]
    shape = getattr(value, "shape", ())
    if len(shape) > 0 and getattr(value, "numel", lambda: 1)() != 1:
        raise ValueError(f"{owner} monitors {name!r}, a tensor of shape {tuple(shape)}; it needs a scalar.")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{owner} monitors {name!r}, whose value {value!r} is not a number.") from None
