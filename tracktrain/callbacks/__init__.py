"""Callbacks for the Trainer: each hook is an Engine event; each built-in callback lives in its own module."""

from __future__ import annotations

from tracktrain._lazy import lazy_attributes

_LAZY = {
    "Callback": "tracktrain.callbacks.base",
    "ModelCheckpoint": "tracktrain.callbacks.model_checkpoint",
    "TrainerProgressBar": "tracktrain.callbacks.progress",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY)
