"""Tuning before a fit: `lr_find` (the learning-rate range test) and `scale_batch_size` (the largest batch that
fits). Each runs short fits of a temporary Trainer built from yours and puts the module back as it was."""

from tracktrain.tuning.batch_size_finder import scale_batch_size
from tracktrain.tuning.lr_finder import LRFinderResult, lr_find

__all__ = ["LRFinderResult", "lr_find", "scale_batch_size"]
