"""Run parameters as trackers keep them: one flat level of `outer/inner` names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["flatten_params"]


def flatten_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as `outer/inner` keys; values kept as they are (trackers stringify what they must)."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_params(value, f"{name}/"))
        else:
            flat[name] = value
    return flat
