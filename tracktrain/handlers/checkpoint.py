"""Checkpoints: save the state of models, optimizers, schedulers, scalers, engines and handlers from an Engine
event, keep the best or the last few, and load them back. Behaves as PyTorch-Ignite's `Checkpoint`,
`DiskSaver` and `ModelCheckpoint` (same file names, retention and state_dict), with these guarantees on top:

- A checkpoint is either fully there or not there: it is serialized in memory first, then committed atomically
  through `tracktrain.storage` (temporary file + fsync + rename on disks, a single put on object stores).
- Retention deletes an old checkpoint only after the new one is committed.
- `load_objects` reads and checks the whole checkpoint before it calls any `load_state_dict`.
- Any fsspec URL works where a directory does: `"/runs/a"`, `"memory://runs/a"`, `"s3://bucket/runs/a"`.

The code lives in `tracktrain.checkpoint` (whose docstring explains the commit protocol); Ignite's public names
are importable from here, as they are from `ignite.handlers.checkpoint`.
"""

from __future__ import annotations

from tracktrain.checkpoint.handler import Checkpoint, CheckpointEvents
from tracktrain.checkpoint.model_checkpoint import ModelCheckpoint
from tracktrain.checkpoint.savers import BaseSaveHandler, DiskSaver, FsspecSaver

__all__ = ["BaseSaveHandler", "Checkpoint", "CheckpointEvents", "DiskSaver", "FsspecSaver", "ModelCheckpoint"]
