"""What MLflow accepts, for `MLflowLogger`: names (characters, length), values (numbers, text lengths) and the size of
one `log_batch` request. Only the standard library: MLflow's entities are built by the caller."""

from __future__ import annotations

import hashlib
import itertools
import numbers
import os
import re
import warnings
from collections.abc import Iterator
from typing import Any

__all__ = ["MAX_KEY_LENGTH", "MAX_PARAM_LENGTH", "MAX_TAG_LENGTH", "batches", "mlflow_name", "scalar", "truncated"]

# MLflow's limits (mlflow/utils/validation.py): per log_batch call, and per name and value
MAX_METRICS, MAX_PARAMS, MAX_TAGS, MAX_ENTITIES = 1000, 100, 100, 1000
MAX_REQUEST_BYTES = 900_000  # MLflow documents 1 MB per batch request (managed servers enforce it); keep a margin
MAX_KEY_LENGTH, MAX_PARAM_LENGTH, MAX_TAG_LENGTH = 250, 6000, 8000
# characters MLflow accepts in metric, param and tag names (no colon on Windows)
_REJECTED_CHARACTERS = re.compile(r"[^/\w.\- ]" if os.name == "nt" else r"[^/\w.\- :]")


def scalar(name: str, value: Any) -> float:
    if isinstance(value, numbers.Real):
        return float(value)
    if getattr(value, "ndim", None) == 0:  # a 0-d tensor or array (a tensor on an accelerator is read here)
        return float(value)
    raise TypeError(
        f"MLflowLogger.log_metrics: metric {name!r} must be a number, got {type(value).__name__} "
        f"{value!r}. Log one number per name (e.g. {name}/0, {name}/1 for the elements)."
    )


def mlflow_name(name: str) -> str:
    """`name` with the characters MLflow rejects as `_`, and no empty, `.` or `..` path parts (MLflow refuses names
    that would resolve to another path); long names keep a hash of the full name, so they stay distinct."""
    parts = [
        part if part not in (".", "..") else "_" * len(part)
        for part in _REJECTED_CHARACTERS.sub("_", name).split("/")
        if part
    ]
    cleaned = "/".join(parts) or "_"
    if len(cleaned) > MAX_KEY_LENGTH:
        cleaned = f"{cleaned[: MAX_KEY_LENGTH - 9]}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"
    return cleaned


def truncated(name: Any, value: str, limit: int, kind: str) -> str:
    if len(value) <= limit:
        return value
    warnings.warn(
        f"The {kind} {name!r} is {len(value)} characters long; MLflow keeps {limit}, so it is truncated.", stacklevel=3
    )
    return value[:limit]


def batches(params: list[Any], tags: list[Any], metrics: list[Any]) -> Iterator[dict[str, list[Any]]]:
    """`log_batch` arguments within MLflow's limits: 100 params, 100 tags, 1000 metrics, 1000 in all, 1 MB a call."""
    limits = {"params": MAX_PARAMS, "tags": MAX_TAGS, "metrics": MAX_METRICS}
    batch: dict[str, list[Any]] = {"params": [], "tags": [], "metrics": []}
    count = size = 0
    entities = itertools.chain(
        (("params", p) for p in params), (("tags", t) for t in tags), (("metrics", m) for m in metrics)
    )
    for kind, entity in entities:
        entity_size = len(entity.key) + len(str(entity.value)) + 80  # the JSON around a metric is ~80 bytes
        if count == MAX_ENTITIES or len(batch[kind]) == limits[kind] or size + entity_size > MAX_REQUEST_BYTES:
            yield batch
            batch = {"params": [], "tags": [], "metrics": []}
            count = size = 0
        batch[kind].append(entity)
        count += 1
        size += entity_size
    if count:
        yield batch
