"""Lightning's `LightningModule` method names that are not ours under that name. A module defining one (and not
ours) would have it silently ignored, so each entry point refuses it with the name to use (issue 35)."""

from __future__ import annotations

__all__ = ["check_lightning_methods"]

# Lightning's name -> ours (the design's renames)
_RENAMED = {
    "training_step": "train_step",
    "validation_step": "eval_step",
}


def check_lightning_methods(module: object, base: type) -> None:
    """Raise when `module`'s class defines a Lightning method name of `_RENAMED` without overriding ours (from
    `base`, the LoopModule)."""
    cls = type(module)
    for lightning, ours in _RENAMED.items():
        if hasattr(cls, lightning) and getattr(cls, ours) is getattr(base, ours):
            raise TypeError(
                f"{cls.__name__} defines {lightning}(), Lightning's name; tracktrain calls it {ours}(self, batch, "
                f"batch_idx), so {lightning} would never run. Rename it to {ours}."
            )
