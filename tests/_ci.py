"""Skips that must not hide a proof on CI: where `CI=true` (GitHub Actions, GitLab CI and most others set it), a
proof that cannot run is a failure; elsewhere (a developer's machine without the tool) it is a skip."""

from __future__ import annotations

import os

import pytest


def in_ci() -> bool:
    """Whether this run is on CI (`CI` set to true, 1 or yes)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def skip_outside_ci(reason: str) -> None:
    """`pytest.skip(reason)`, or on CI `pytest.fail`: CI must run every proof it is set up for."""
    if in_ci():
        pytest.fail(f"{reason} (a skip is a failure under CI={os.environ['CI']})", pytrace=False)
    pytest.skip(reason)
