"""Lightning's `lightning.pytorch.tuner` path, for ported programs: `Tuner` (`tracktrain.tuning.Tuner`)."""

from tracktrain.tuning.tuner import Tuner

__all__ = ["Tuner"]
