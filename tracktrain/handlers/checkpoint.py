"""Checkpoints: save the state of models, optimizers, schedulers, scalers, engines and handlers from an Engine
event, keep the best or the last few, and load them back. Behaves as PyTorch-Ignite's `Checkpoint`,
`DiskSaver` and `ModelCheckpoint` (same file names, retention and state_dict), with these guarantees on top:

- A checkpoint is either fully there or not there: it is serialized in memory first, then committed atomically
  through `tracktrain.storage` (temporary file + fsync + rename on disks, a single put on object stores).
- Retention deletes an old checkpoint only after the new one is committed.
- `load_objects` reads and checks the whole checkpoint before it calls any `load_state_dict`.
- Any fsspec URL works where a directory does: `"/runs/a"`, `"memory://runs/a"`, `"s3://bucket/runs/a"`.

The parts, one job each: `checkpoint_handler` (the `Checkpoint` handler, which saves), `checkpoint_names` (how its
files are named), `checkpoint_retention` (which ones it keeps), `checkpoint_loading` (loading one back, all or
none), `model_checkpoint` (Ignite's `ModelCheckpoint`: a `Checkpoint` into a directory) and `savers` (where the
files go). Their public names are importable from here, as Ignite's are from `ignite.handlers.checkpoint`.
"""

from __future__ import annotations

from tracktrain.handlers.checkpoint_handler import Checkpoint, CheckpointEvents
from tracktrain.handlers.model_checkpoint import ModelCheckpoint
from tracktrain.handlers.savers import BaseSaveHandler, DiskSaver, FsspecSaver

__all__ = ["BaseSaveHandler", "Checkpoint", "CheckpointEvents", "DiskSaver", "FsspecSaver", "ModelCheckpoint"]
