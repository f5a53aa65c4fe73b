"""matplotlib, the tuning plots' one optional dependency: imported here, when a plot is drawn, never at import."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["new_figure"]


def new_figure() -> Figure:
    """A matplotlib Figure that pyplot does not keep (no global state, no GUI backend): save it or show it."""
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(
            "Plotting the learning-rate sweep needs matplotlib, which is not installed: pip install matplotlib"
        ) from error
    return Figure(figsize=(6.4, 4.8), layout="tight")
