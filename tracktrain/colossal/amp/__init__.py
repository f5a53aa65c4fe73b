"""Colossal-AI's `colossalai.amp`: `AMP_TYPE`, the `mode` of a config's `fp16 = dict(mode=...)`."""

from __future__ import annotations

from enum import Enum

__all__ = ["AMP_TYPE"]


class AMP_TYPE(Enum):  # noqa: N801 (Colossal-AI's name)
    """The mixed-precision modes of Colossal-AI's config. `TORCH` is torch's automatic mixed precision (autocast
    and a GradScaler, the ones tracktrain's `ModelEngine` runs); `NAIVE` and `APEX` are refused by `launch` with the
    reason (`tracktrain.colossal.context.features`)."""

    APEX = "apex"
    TORCH = "torch"
    NAIVE = "naive"
