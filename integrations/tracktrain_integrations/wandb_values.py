"""What W&B accepts, for `WandbLogger`: the choices of its mode, watch and resume arguments, tags (1 to 64
characters) and config values (JSON only). Only the standard library: W&B itself is imported by the logger."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MAX_TAG_LENGTH",
    "MODES",
    "RESUME_MODES",
    "WATCH_MODES",
    "check_choice",
    "checked_tag",
    "json_safe",
    "truncated_tag",
]

_logger = logging.getLogger("tracktrain_integrations.wandb")  # the W&B logger's messages, under its own name

MODES = ("online", "offline", "disabled")
WATCH_MODES = ("gradients", "parameters", "all")
RESUME_MODES = ("allow", "must", "never", "auto")
MAX_TAG_LENGTH = 64  # W&B rejects the whole tag update when one tag is longer


def check_choice(argument: str, value: str | None, choices: tuple[str, ...]) -> None:
    if value is not None and value not in choices:
        raise ValueError(f"WandbLogger({argument}=...) must be one of {choices} or None, got {value!r}.")


def checked_tag(tag: str) -> str:
    if not isinstance(tag, str) or not 1 <= len(tag) <= MAX_TAG_LENGTH:
        raise ValueError(f"WandbLogger(tags=...) takes strings of 1 to {MAX_TAG_LENGTH} characters, got {tag!r}.")
    return tag


def truncated_tag(tag: str) -> str:
    if len(tag) <= MAX_TAG_LENGTH:
        return tag
    _logger.warning(
        "W&B tag %r is longer than %d characters; kept as its first %d", tag, MAX_TAG_LENGTH, MAX_TAG_LENGTH
    )
    return tag[:MAX_TAG_LENGTH]


def json_safe(params: Mapping[str, Any]) -> dict[str, Any]:
    """`params` with JSON values only: anything else (a dtype, a device, a class) as its str. A value W&B refuses
    would fail its whole batch again at every retry."""
    return {key: _json_value(value) for key, value in params.items()}


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_json_value(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _json_value(item) for key, item in value.items()}
    return str(value)
