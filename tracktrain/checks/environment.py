"""Settings read from environment variables: one parser, so every variable fails the same clear way."""

from __future__ import annotations

import os

__all__ = ["positive_setting"]


def positive_setting(variable: str, default: float, kind: type = float, unit: str = "") -> float:
    """`variable`'s value as a positive finite `kind` (float or int), or `default` when it is unset; anything else
    is a ValueError naming the variable, its value and the default."""
    text = os.environ.get(variable)
    if text is None:
        return default
    try:
        value = kind(text)
    except ValueError:
        value = 0
    if not 0 < value < float("inf"):  # NaN fails this too
        whole = "whole " if kind is int else ""
        of_unit = f" of {unit}" if unit else ""
        raise ValueError(
            f"{variable}={text!r} must be a positive {whole}number{of_unit}; unset it for the default "
            f"({default}{' ' + unit if unit else ''})."
        )
    return value
