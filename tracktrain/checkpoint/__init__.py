"""Checkpoints, the whole story in one package: what a checkpoint holds, how it is committed, where it goes, which
ones are kept, how the newest complete one is found, and how a fit resumes from it.

**The commit protocol.** A checkpoint counts only once it is committed, so a crash, a kill or a full disk at any
moment leaves each checkpoint complete or absent, never half there:

1. the state is collected (`state`) and serialized in memory — for a sharded model each rank writes its own shards
   with `torch.distributed.checkpoint` instead (`sharded`, `sharded_saver`);
2. the files are written through `tracktrain.storage` (temporary file, fsync and rename on a disk; one put on an
   object store), by the one rank that saves (`savers`), in a background thread when asked (`async_saver`), or kept
   in a local spool while a remote store does not answer and delivered in order later (`spool`);
3. the manifest is written last (`manifest`): every file with its size and SHA-256, and the run's step, epoch and
   tracker run ids. No manifest, or one that does not match its files, means not committed;
4. only then does retention delete older checkpoints (`retention`; deleting removes the manifest first);
5. a directory has one writing run at a time (`lease`, `lease_record`), so two runs never delete each other's.

**Reading back.** `discovery` is the one place that decides which checkpoints of a directory are committed and
which is the newest (by the step its manifest records, never by file name); `resume` picks the one a fit resumes
from; `loading` loads one into its objects all or none; `run_settings` is what a checkpoint records of the run
(module class, hparams, Trainer arguments), compared when a fit resumes.

**The handlers.** `handler.Checkpoint` and `model_checkpoint.ModelCheckpoint` behave as PyTorch-Ignite's (file
names from `names`, re-exported by `tracktrain.handlers`); `filename_template` gives Lightning's
`ModelCheckpoint(filename="{epoch}-{val_loss:.2f}")` names. The Trainer's callback that uses all of this is
`tracktrain.callbacks.ModelCheckpoint`; how the Trainer saves and resumes its own state is
`tracktrain.trainer.run_checkpoints`.
"""
