"""A stand-in for seaborn in the Lightning program ports (scripts/lightning_port): the tutorials plot their
`metrics.csv` with `sn.relplot(data=...)` at the end; here the plot is drawn by nothing, the data is checked to be a
table (a pandas DataFrame), as seaborn would need it."""

from __future__ import annotations


def set(*args, **kwargs):  # noqa: A001 - seaborn's name
    return None


set_theme = set


def relplot(data=None, **kwargs):
    if data is not None and not hasattr(data, "columns"):
        raise TypeError(f"relplot(data=...) needs a table, not {type(data).__name__}")
    return None


lineplot = heatmap = relplot


def __getattr__(name):
    # the styling calls (reset_orig, set_palette, set_style, ...) change nothing in a run without a screen
    if name.startswith("__"):
        raise AttributeError(name)
    return set
