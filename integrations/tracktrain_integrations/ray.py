"""Ray Train for the Trainer: `fit` inside the workers of Ray's `TorchTrainer`, every checkpoint the run commits
reported to Ray, and a restarted (or restored) Ray run resumed from Ray's latest checkpoint.

Ray's `TorchTrainer` starts one process per worker and joins them into a process group before the training function
runs (gloo on CPU, nccl on GPU) with torchrun's variables set (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...), so
`Trainer(strategy="ddp")` (or `"fsdp"`) uses that group as it is. In the training function:

.. code-block:: python

    def train_loop(config):
        trainer = Trainer(max_epochs=10, strategy="ddp", default_root_dir=config["root"], callbacks=[RayTrainReport()])
        tracktrain_integrations.ray.fit(trainer, Classifier(), train_loader, val_loader)

- `RayTrainReport` calls `ray.train.report` on every rank at the end of every training epoch (and at every step a
  `ModelCheckpoint(every_n_train_steps=n)` saves), with the values the run logged; rank 0 attaches the checkpoint
  its `ModelCheckpoint`s committed at that step (the checkpoint file and its manifest, as one Ray checkpoint).
- `fit` is `trainer.fit` resumed from Ray's checkpoint: `ray.train.get_checkpoint()` (the latest one reported, after
  Ray restarted the workers or restored the run) or the one given.

Needs Ray Train: `pip install 'tracktrain[ray]'`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from tracktrain import storage
from tracktrain.callbacks.base import Callback, CallbackPhase
from tracktrain.checkpoint.discovery import CommittedCheckpoint, committed_checkpoints
from tracktrain.checkpoint.manifest import manifest_name
from tracktrain.distributed.ranks import global_rank
from tracktrain.trainer.strategies import DataParallelStrategy

if TYPE_CHECKING:
    from tracktrain.trainer.module import LoopModule
    from tracktrain.trainer.surface import TrainerSurface
    from tracktrain.trainer.trainer import Trainer

__all__ = ["RayTrainReport", "checkpoint_path", "fit"]


def _ray_train() -> Any:
    try:
        import ray.train
    except ImportError as error:
        raise ImportError(
            f"The Ray Train integration needs Ray Train ({error}): pip install 'tracktrain[ray]'"
        ) from error
    return ray.train


def _worker_context(caller: str) -> Any:
    """Ray Train's context of this worker; a clear error outside one."""
    try:
        return _ray_train().get_context()
    except RuntimeError as error:
        raise RuntimeError(
            f"{caller} runs inside a Ray Train worker only: call it in the training function given to "
            f"ray.train.torch.TorchTrainer(train_loop, ...) ({error})."
        ) from error


class RayTrainReport(Callback):
    """Reports the run to Ray Train: `ray.train.report(metrics, checkpoint=...)` on every rank (Ray requires every
    worker to report, the same number of times) at the end of every training epoch, and at every step a checkpointer
    with `every_n_train_steps` saves (a step that ends an epoch is reported at the epoch's end). The metrics are the values the run logged (`trainer.logged_metrics`) with
    `epoch` and `global_step`; rank 0 attaches the newest checkpoint committed at that step by the run's
    `ModelCheckpoint`s (waiting for a background write to commit first), copied with its manifest into a directory
    of its own, which Ray persists to `RunConfig(storage_path=...)`. A checkpoint that could not be committed (a
    store that is down) is not attached; the metrics are still reported.

    Args:
        checkpoint_dir_prefix: the prefix of the name of each checkpoint in Ray's storage (`{prefix}{global step}`).
    """

    phase = CallbackPhase.LAST  # after the checkpointers (AFTER_DECISIONS), so the step's checkpoint is there to report

    def __init__(self, checkpoint_dir_prefix: str = "tracktrain_step_") -> None:
        if not isinstance(checkpoint_dir_prefix, str) or not checkpoint_dir_prefix or "/" in checkpoint_dir_prefix:
            raise ValueError(
                "RayTrainReport(checkpoint_dir_prefix=...) must be a non-empty folder name prefix without '/', got "
                f"{checkpoint_dir_prefix!r}."
            )
        self.checkpoint_dir_prefix = checkpoint_dir_prefix
        self._reported_step = -1
        self._step_intervals: list[int] = []

    def on_fit_start(self, trainer: TrainerSurface, module: LoopModule) -> None:
        _worker_context("RayTrainReport")
        self._reported_step = -1
        self._step_intervals = [
            interval
            for checkpointer in trainer.checkpoint_callbacks
            if isinstance(interval := getattr(checkpointer, "every_n_train_steps", None), int)
        ]

    def on_train_batch_end(
        self, trainer: TrainerSurface, module: LoopModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step  # the same on every rank: every rank reports at the same steps
        if step > 0 and any(step % interval == 0 for interval in self._step_intervals) and not _ends_epoch(trainer):
            self._report(trainer)

    def on_train_epoch_end(self, trainer: TrainerSurface, module: LoopModule) -> None:
        self._report(trainer)

    def _report(self, trainer: TrainerSurface) -> None:
        step = trainer.global_step
        if step == self._reported_step:  # one report per step (a step save at an epoch's end, accumulation)
            return
        self._reported_step = step
        metrics = {**trainer.logged_metrics, "epoch": trainer.current_epoch, "global_step": step}
        checkpointers = trainer.checkpoint_callbacks
        for checkpointer in checkpointers:  # every rank: a sharded checkpoint commits once all ranks wrote theirs
            checkpointer.wait()
        committed = _committed_at(step, trainer.checkpoint_directories) if global_rank() == 0 else None
        ray_train = _ray_train()
        if committed is None:
            ray_train.report(metrics)
            return
        # a folder of this checkpoint's own, which Ray copies to its storage and then deletes (in Ray's local mode,
        # `num_workers=0`, nothing is copied: the folder is the checkpoint Ray keeps, and stays)
        staging = tempfile.mkdtemp(prefix="tracktrain-ray-")
        try:
            _copy_checkpoint(committed, staging)
            ray_train.report(
                metrics,
                checkpoint=ray_train.Checkpoint.from_directory(staging),
                checkpoint_dir_name=f"{self.checkpoint_dir_prefix}{step}",
                delete_local_checkpoint_after_upload=True,
            )
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise


def _ends_epoch(trainer: TrainerSurface) -> bool:
    """Whether the batch just trained is the epoch's last (or the run's): its step is reported at the epoch's end,
    after the validation and the epoch's checkpoints."""
    state = trainer.train_engine.state
    last_batch = bool(state.epoch_length) and state.iteration % state.epoch_length == 0
    return last_batch or (trainer.max_steps is not None and trainer.global_step >= trainer.max_steps)


def _committed_at(step: int, directories: Iterable[str]) -> CommittedCheckpoint | None:
    """The newest committed checkpoint of `directories` taken at global step `step` (None: none was)."""
    found = [
        checkpoint
        for directory in dict.fromkeys(directories)
        for checkpoint in committed_checkpoints(directory)[0]
        if checkpoint.summary.get("global_step") == step
    ]
    return max(found, key=lambda checkpoint: checkpoint.order, default=None)


def _copy_checkpoint(checkpoint: CommittedCheckpoint, destination: str) -> None:
    """The files of `checkpoint` (those its manifest lists: one file, or a sharded checkpoint's directory) and its
    manifest, into the local folder `destination`: hard links where the run's directory is local, a copy otherwise."""
    local = storage.local_path(checkpoint.directory)
    for name in [*checkpoint.manifest["files"], manifest_name(checkpoint.data_filename)]:
        target = os.path.join(destination, *name.split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if local is not None:
            source = os.path.join(local, *name.split("/"))
            try:
                os.link(source, target)  # a checkpoint file is never written again after its commit
            except OSError:  # another file system, or links not allowed
                shutil.copyfile(source, target)
        else:
            fs, path = storage.open_filesystem(storage.join(checkpoint.directory, name))
            fs.get_file(path, target)


def _newest_committed(directory: str) -> CommittedCheckpoint:
    checkpoints, problems = committed_checkpoints(directory)
    if not checkpoints:
        found = "; ".join(problems) or f"its files: {storage.listdir(directory) if storage.exists(directory) else []}"
        raise FileNotFoundError(
            f"The Ray checkpoint {directory} holds no committed tracktrain checkpoint ({found}). Resume from a "
            "checkpoint that RayTrainReport reported, or start the run without one."
        )
    return checkpoints[0]


@contextlib.contextmanager
def checkpoint_path(checkpoint: Any = None) -> Iterator[str | None]:
    """The committed tracktrain checkpoint inside a Ray checkpoint, as a path for `trainer.fit(ckpt_path=...)`, valid
    inside the `with` block (a checkpoint in remote storage is downloaded for its duration). `checkpoint`: a
    `ray.train.Checkpoint`; default `ray.train.get_checkpoint()`, the latest one reported when Ray restarted the
    workers or restored the run (None when there is none: then the path is None, a new run)."""
    if checkpoint is None:
        _worker_context("tracktrain_integrations.ray.checkpoint_path()")
        checkpoint = _ray_train().get_checkpoint()
    if checkpoint is None:
        yield None
        return
    if not isinstance(checkpoint, _ray_train().Checkpoint):
        raise TypeError(
            f"checkpoint must be a ray.train.Checkpoint (result.checkpoint, or one of result.best_checkpoints), got "
            f"{type(checkpoint).__name__}: {checkpoint!r}."
        )
    with checkpoint.as_directory() as directory:
        yield _newest_committed(os.fspath(directory)).url


def fit(
    trainer: Trainer,
    module: Any,
    train_dataloaders: Iterable[Any] | None = None,
    val_dataloaders: Iterable[Any] | None = None,
    *,
    checkpoint: Any = None,
    **fit_kwargs: Any,
) -> None:
    """`trainer.fit(module, train_dataloaders, val_dataloaders, ...)` inside a Ray Train worker, resumed from Ray's
    checkpoint: `checkpoint` (a `ray.train.Checkpoint`, say one passed in the `train_loop_config`) or else
    `ray.train.get_checkpoint()`; a new run when there is neither (then `Trainer(resume=...)` decides, as in any
    fit). The Trainer must report to Ray (`RayTrainReport` among its callbacks) and, with more than one worker,
    train data-parallel on the process group Ray started (`strategy="ddp"` or `"fsdp"`). `fit_kwargs`: the rest of
    `Trainer.fit`'s keywords (`optimizer=`, `criterion=` for a plain model); not `ckpt_path`, which Ray's
    checkpoint gives."""
    context = _worker_context("tracktrain_integrations.ray.fit()")
    if "ckpt_path" in fit_kwargs:
        raise TypeError(
            "tracktrain_integrations.ray.fit() resumes from Ray's checkpoint: give a ray.train.Checkpoint as "
            f"checkpoint=..., not ckpt_path={fit_kwargs['ckpt_path']!r} (or call trainer.fit(ckpt_path=...) yourself)."
        )
    if not any(isinstance(callback, RayTrainReport) for callback in trainer.callbacks):
        raise ValueError(
            "The Trainer does not report to Ray, so Ray would keep no checkpoint to resume from: build it with "
            "Trainer(callbacks=[RayTrainReport(), ...])."
        )
    workers = context.get_world_size()
    if workers > 1 and not isinstance(trainer.strategy, DataParallelStrategy):
        raise ValueError(
            f"Ray started {workers} workers, but Trainer(strategy={trainer.strategy.name!r}) would train a separate "
            "model in each: use Trainer(strategy='ddp') (or 'fsdp'), which trains one model over Ray's process group."
        )
    with checkpoint_path(checkpoint) as ckpt_path:
        trainer.fit(module, train_dataloaders, val_dataloaders, ckpt_path=ckpt_path, **fit_kwargs)
