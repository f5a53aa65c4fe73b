"""Lightning's `disable_possible_user_warnings`: silence the warnings tracktrain gives about a program's possible
mistakes (its `PossibleUserWarning`s: Lightning's too, where it is installed)."""

from __future__ import annotations

import warnings

__all__ = ["PossibleUserWarning", "disable_possible_user_warnings"]


class PossibleUserWarning(UserWarning):
    """A warning about something that is likely a mistake, but may be intended."""


def disable_possible_user_warnings(module: str = "") -> None:
    """Ignore `PossibleUserWarning`s (from `module` only, when given)."""
    warnings.filterwarnings("ignore", category=PossibleUserWarning, module=module)
