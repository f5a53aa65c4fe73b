"""Run-time checks that an argument is a number, for the public entry points that validate what they are given.

typeshed does not register `int` and `float` as `numbers.Integral` and `numbers.Real`, so `isinstance(x,
numbers.Integral)` on a parameter annotated `int` makes a type checker treat the code after a failed check as
unreachable (and leave it unchecked). Taking `object` keeps the check exact (numpy integers pass, as before) and
the caller's static type as it is.
"""

from __future__ import annotations

import numbers

__all__ = ["is_integral", "is_real"]


def is_integral(value: object) -> bool:
    """`isinstance(value, numbers.Integral)`: int and numpy integers (bool too: callers exclude it)."""
    return isinstance(value, numbers.Integral)


def is_real(value: object) -> bool:
    """`isinstance(value, numbers.Real)`: int, float and numpy scalars (bool too: callers exclude it)."""
    return isinstance(value, numbers.Real)
