"""`Trainer.validate/test/predict(ckpt_path=...)`, Lightning's: the weights of a checkpoint loaded into the module
before the pass. "best": the first `ModelCheckpoint`'s `best_model_path` (without a `monitor`, the latest it saved, as
Lightning); "last": the run's newest complete checkpoint, found as `fit(ckpt_path="last")` finds it
(`resume_candidates`, `load_newest`); a path or fsspec URL: that checkpoint. Only the module's weights are read, as `load_from_checkpoint` reads them
(`module_loading.load_weights`); None: the module's weights as they are (after a fit, the last ones)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from tracktrain.checkpoint.discovery import resume_candidates
from tracktrain.checkpoint.manifest import CheckpointCorrupted
from tracktrain.checkpoint.resume import load_newest
from tracktrain.trainer.arguments import check_location
from tracktrain.trainer.module_loading import load_weights

if TYPE_CHECKING:
    from tracktrain.trainer.module import LoopModule
    from tracktrain.trainer.run_checkpoints import RunCheckpoints

__all__ = ["load_stage_checkpoint"]


def load_stage_checkpoint(checkpoints: RunCheckpoints, stage: str, module: LoopModule, ckpt_path: Any) -> str | None:
    """Load the weights `ckpt_path` names into `module` for `Trainer.<stage>`; returns the checkpoint loaded (None
    for `ckpt_path=None`). Errors name the argument and the fix."""
    if ckpt_path is None:
        return None
    owner = f"Trainer.{stage}(ckpt_path=...)"
    target = check_location(owner, ckpt_path, 'a checkpoint file\'s path or URL, "best" or "last"')
    for checkpointer in checkpoints.checkpointers:
        checkpointer.wait()  # a save still in flight may be the one asked for
    if target == "last":
        directories = checkpoints.directories()
        loaded = load_newest(resume_candidates(directories), lambda url: _load(module, url, owner))
        if loaded is None:
            raise FileNotFoundError(
                f'{owner}: "last" found no complete checkpoint in {directories}. Fit first (with checkpointing on), '
                "or pass a checkpoint's path."
            )
        return loaded
    url = _best_path(checkpoints, owner) if target == "best" else target
    _load(module, url, owner)
    return url


def _best_path(checkpoints: RunCheckpoints, owner: str) -> str:
    callback = checkpoints.first
    if callback is None:
        raise ValueError(
            f'{owner}: "best" needs a ModelCheckpoint among the callbacks, and this Trainer has none. Give '
            'Trainer(callbacks=[ModelCheckpoint(monitor="val_loss")]), or pass "last" or a checkpoint\'s path.'
        )
    name = type(callback).__name__
    # as Lightning: without a monitor, the best checkpoint is the latest one the callback saved
    best = getattr(callback, "best_model_path", None)
    if not best:
        raise ValueError(
            f'{owner}: "best": the {name} has no best checkpoint yet. Call trainer.fit(...) first (the best is kept '
            "as it validates), or pass a checkpoint's path."
        )
    return os.fspath(best)


def _load(module: LoopModule, url: str, owner: str) -> None:
    """`load_weights`, its errors said as `owner`'s: a missing file, a checkpoint written for another module."""
    try:
        load_weights(module, url)
    except CheckpointCorrupted:
        raise  # "last" skips it for the one before; named, it says what is wrong itself
    except FileNotFoundError as error:
        raise FileNotFoundError(
            f"{owner}: no checkpoint at {url!r}. Check the path (trainer.checkpoint_callback.best_model_path and "
            '`tracktrain runs ROOT` list the run\'s checkpoints), or pass "best" or "last".'
        ) from error
    except (KeyError, ValueError, RuntimeError) as error:
        raise ValueError(
            f"{owner}: checkpoint {url} does not fit {type(module).__name__}: {error} Pass a "
            "checkpoint written for this module (ModelCheckpoint.best_model_path of its fit), or ckpt_path=None for "
            "its weights as they are."
        ) from error
