"""Tuning before a fit: `lr_find` (the learning-rate range test) and `scale_batch_size` (the largest batch that
fits). Each runs short fits of a temporary Trainer built from yours and puts the module back as it was. `Tuner` is
Lightning's face over both (`from tracktrain.tuner import Tuner`, as `lightning.pytorch.tuner`)."""

from tracktrain.tuning.batch_size_finder import scale_batch_size
from tracktrain.tuning.lr_finder import LRFinderResult, lr_find
from tracktrain.tuning.tuner import Tuner

__all__ = ["LRFinderResult", "Tuner", "lr_find", "scale_batch_size"]
