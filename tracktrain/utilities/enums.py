"""Lightning's enums: `LightningEnum` (a `str` enum that compares equal to its value, case-insensitively) and
`GradClipAlgorithmType` (the values `Trainer(gradient_clip_algorithm=...)` takes)."""

from __future__ import annotations

from enum import Enum, StrEnum
from typing import Any

__all__ = ["GradClipAlgorithmType", "LightningEnum"]


class LightningEnum(StrEnum):
    @classmethod
    def from_str(cls, value: str, source: str = "key") -> LightningEnum:
        for member in cls:
            if (source in ("key", "any") and member.name.lower() == value.lower()) or (
                source in ("value", "any") and member.value.lower() == value.lower()
            ):
                return member
        raise ValueError(f"Invalid match: expected one of {[m.name for m in cls]}, but got {value}.")

    def __eq__(self, other: object) -> bool:
        other = other.value if isinstance(other, Enum) else str(other)
        return self.value.lower() == other.lower()

    def __hash__(self) -> int:
        return hash(self.value.lower())

    def __str__(self) -> Any:
        return self.value


class GradClipAlgorithmType(LightningEnum):
    VALUE = "value"
    NORM = "norm"
