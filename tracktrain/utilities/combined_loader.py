"""Lightning's `lightning.pytorch.utilities.combined_loader` path: the engine's `CombinedLoader`."""

from __future__ import annotations

from tracktrain.engine.combined_loader import CombinedLoader

__all__ = ["CombinedLoader"]
