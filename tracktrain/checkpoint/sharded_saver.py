"""`ShardedSaver`: every rank writes its own shards of a checkpoint with `torch.distributed.checkpoint` (DCP), and
the checkpoint is committed, as every other, by one manifest written last.

The commit protocol, for a checkpoint named `name` in the directory `url`:

1. rank 0 removes a checkpoint saved before under `name` (manifest first), and every rank waits for it;
2. every rank writes its shards into `url/name/` (DCP: its coordinator, rank 0, writes `.metadata` once every rank
   reported its writes); rank 0 also writes what is not sharded (`sharded.REST_KEY`);
3. every rank hashes the files it wrote, the hashes are gathered, and rank 0 writes the manifest, listing every file
   with its size and SHA-256: only now is the checkpoint complete;
4. rank 0 tells every rank whether the commit succeeded, so that all of them raise, or none does.

A save killed at any point before 3 leaves a directory without a manifest: never loaded, and swept at the start of
the next run (`manifest.remove_uncommitted`). Its collectives use the process group it is given: one of its own
(`ShardedSaver.process_group`), so that a save in the background (`AsyncSaver`) never interleaves its collectives
with the training step's on the default group.
"""

from __future__ import annotations

import contextlib
import io
import os
import traceback
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException

from tracktrain import storage
from tracktrain.checkpoint.manifest import FileDigest, remove_checkpoint, sha256_of, write_manifest
from tracktrain.checkpoint.savers import CheckpointSkipped, CheckpointWriteError, FsspecSaver
from tracktrain.checkpoint.sharded import METADATA_FILE, REST_KEY, storage_writer
from tracktrain.distributed import collectives as distributed
from tracktrain.distributed.ranks import global_rank
from tracktrain.storage.check import is_unreachable

__all__ = ["RankState", "ShardedSaver", "holds_shards", "write_sharded"]


class ShardedSaver(FsspecSaver):
    """Saves each checkpoint as a directory of shards, every rank writing its own (see the module's description).
    `path_of`, retention's `remove` and the manifests are `FsspecSaver`'s (rank 0 deletes a whole checkpoint).

    Args:
        url: the directory of the checkpoints: a local path or any fsspec URL (shared by every rank: each writes its
            files there, and rank 0 lists them all).
        create_dir, require_empty, summarize: as `FsspecSaver`'s.
        process_group: the group of every rank whose collectives the saves use (None: the default group).
    """

    #: the file name extension of its checkpoints (directories): `Checkpoint.ext` for the handlers that use it
    extension = "dcp"

    def __init__(
        self,
        url: str | os.PathLike,
        create_dir: bool = True,
        require_empty: bool = False,
        summarize: Callable[[Mapping], Mapping[str, Any]] | None = None,
        process_group: dist.ProcessGroup | None = None,
    ) -> None:
        super().__init__(url, create_dir=create_dir, require_empty=require_empty, manifest=True, summarize=summarize)
        self.process_group = process_group

    def __call__(self, checkpoint: Mapping, filename: str, metadata: Mapping | None = None) -> None:
        from torch.distributed.checkpoint.state_dict_saver import save

        if filename in self.protected:  # the checkpoint this run resumed from, of this very step: kept as it is
            return
        directory = os.fspath(self.path_of(filename))
        rank = global_rank() if distributed.is_distributed() else 0
        state: dict[str, Any] = {key: value for key, value in checkpoint.items() if holds_shards(value)}
        failure: tuple[str, bool] | None = None
        if rank == 0:  # the rest is the same on every rank: rank 0's is written
            try:
                rest = io.BytesIO()
                torch.save({key: value for key, value in checkpoint.items() if key not in state}, rest)
                rest.seek(0)
                state[REST_KEY] = rest
                remove_checkpoint(self.url, filename)  # one saved before under this name stops being one, first
            except Exception as error:  # noqa: BLE001 - every rank learns it next, and none writes
                failure = (_described(error, rank), _unreachable(error))
        # no rank writes into the directory before that, and none does if it failed
        failure = distributed.rank_zero_value(failure, self.process_group)
        every_file: set[str] = set()
        digests: dict[str, FileDigest] = {}
        if failure is None:
            try:
                written = save(state, storage_writer=storage_writer(directory), process_group=self.process_group)
                every_file = _files_written(written, directory)
                digests = _digests(directory, {name for name in every_file if _written_by(name, rank)})
            except (Exception, CheckpointException) as error:  # noqa: BLE001 - every rank learns it below
                failure = (_described(error, rank), _unreachable(error))
        reports = distributed.gather_objects((failure, digests), self.process_group)
        outcome = None
        if rank == 0:
            outcome = self._commit(filename, checkpoint, metadata, reports, every_file)
        outcome = distributed.rank_zero_value(outcome, self.process_group)
        if outcome is not None:
            message, unreachable = outcome
            if unreachable:  # every rank: the loop goes on without this checkpoint
                raise CheckpointSkipped(
                    f"Checkpoint {filename} was not written to {self.url}: the store did not answer ({message}). "
                    "What it had written was removed, the checkpoints saved before it are intact, and training goes "
                    "on; the next checkpoint tries again."
                )
            size = sum(digest.bytes for _, digests in reports for digest in digests.values())
            raise CheckpointWriteError(OSError(message), filename, self.url, size)

    def _commit(
        self,
        filename: str,
        checkpoint: Mapping,
        metadata: Mapping | None,
        reports: list[tuple[tuple[str, bool] | None, dict[str, FileDigest]]],
        every_file: set[str],
    ) -> tuple[str, bool] | None:
        """On rank 0, once every rank reported: write the manifest, or remove what was written. What went wrong and
        whether the store did not answer, or None."""
        reported = [failure for failure, _ in reports if failure is not None]
        failures = list(dict.fromkeys(text for text, _ in reported))  # DCP's own failures are reported on all ranks
        unreachable = any(store_down for _, store_down in reported)
        if not failures:
            try:
                hashed = {name: digest for _, digests in reports for name, digest in digests.items()}
                hashed.update(_digests(self.path_of(filename), every_file - set(hashed)))  # no rank claimed them
                files = {f"{filename}/{name}": digest for name, digest in hashed.items()}
                summary = dict(self._summarize(checkpoint)) if self._summarize is not None else {}
                write_manifest(self.url, dict(sorted(files.items())), summary, metadata, checkpoint_name=filename)
                return None
            except Exception as error:  # noqa: BLE001 - reported to every rank
                failures.append(f"writing the manifest: {type(error).__name__}: {error}")
                unreachable = is_unreachable(error)
        with contextlib.suppress(Exception):  # a checkpoint is complete or absent (a store down keeps what it has)
            remove_checkpoint(self.url, filename)
        return "; ".join(failures), unreachable

    def remove_now(self, filename: str) -> None:
        """Retention's removal (rank 0): a store that does not answer leaves the checkpoint there, said, rather than
        stopping rank 0 alone (the next run's retention counts it: it is committed)."""
        try:
            super().remove_now(filename)
        except Exception as error:
            if not is_unreachable(error):
                raise
            warnings.warn(
                f"Could not remove checkpoint {filename} from {self.url}: the store did not answer ({error}). It "
                "stays, committed; the next run's retention removes it.",
                stacklevel=2,
            )

    def serialize(self, checkpoint: Mapping) -> tuple[memoryview, dict[str, Any]]:
        raise NotImplementedError("ShardedSaver writes each rank's shards itself; it serializes no single file.")


def write_sharded(
    states: Mapping[str, Any], url: str, summary: Mapping[str, Any], metadata: Mapping[str, Any] | None = None
) -> None:
    """Write `states` (a full checkpoint, as read) as a sharded checkpoint at `url`, by this process alone: the model
    and the optimizers in DCP's format (each rank of a sharded run then reads its own part), the rest as the blob a
    sharded run writes; then its manifest (with `summary` and `metadata`), in the directory above. (`tracktrain convert
    FILE DIR.dcp`.)"""
    from torch.distributed.checkpoint.state_dict_saver import save

    directory, name = storage.split(url)
    sharded = {key: value for key, value in states.items() if key in ("model", "optimizers")}
    rest = io.BytesIO()
    torch.save({key: value for key, value in states.items() if key not in sharded}, rest)
    rest.seek(0)
    written = save({**sharded, REST_KEY: rest}, storage_writer=storage_writer(url), no_dist=True)
    every_file = {info.relative_path for info in written.storage_data.values()} | {METADATA_FILE}
    files = {f"{name}/{member}": digest for member, digest in _digests(url, every_file).items()}
    write_manifest(directory, dict(sorted(files.items())), summary, metadata, checkpoint_name=name)


class RankState(dict):
    """A state each rank holds its own part of, as plain tensors under keys no other rank's part has (a pipeline
    rank's stages): every rank saves its part, as it saves its shards of DTensors."""


def holds_shards(value: Any) -> bool:
    """Whether `value` (a state dict) holds a DTensor, or is a `RankState`: then each rank saves its own part."""
    from torch.distributed.tensor import DTensor

    if isinstance(value, (DTensor, RankState)):
        return True
    if isinstance(value, Mapping):
        return any(holds_shards(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(holds_shards(item) for item in value)
    return False


def _described(error: BaseException, rank: int) -> str:
    """What went wrong, on which rank, and where it was raised (the error crosses processes as text, its traceback
    lost): DCP's CheckpointException holds every failing rank's error and stack."""
    if isinstance(error, CheckpointException):  # every rank holds the same: rank 0's is the one reported
        return "; ".join(
            f"rank {failed}: {type(cause[0]).__name__}: {cause[0]}{_raised_at(cause[1])}"
            if isinstance(cause, tuple)
            else f"rank {failed}: {cause}"
            for failed, cause in sorted(error.failures.items())
        )
    return f"rank {rank}: {type(error).__name__}: {error}{_raised_at(traceback.extract_tb(error.__traceback__))}"


def _raised_at(stack: Any) -> str:
    frames = list(stack) if isinstance(stack, traceback.StackSummary) else []
    if not frames:
        return ""
    frame = frames[-1]
    path = frame.filename.split("site-packages/")[-1]
    return f" (raised at {path}:{frame.lineno} in {frame.name})"


def _unreachable(error: BaseException) -> bool:
    if isinstance(error, CheckpointException):
        causes = [cause[0] if isinstance(cause, tuple) else cause for cause in error.failures.values()]
        return any(isinstance(cause, BaseException) and is_unreachable(cause) for cause in causes)
    return is_unreachable(error)


def _files_written(metadata: Any, directory: str) -> set[str]:
    """The files of the checkpoint DCP's `save` just wrote into `directory` (every rank's: it returns once the
    coordinator wrote `.metadata`, after every rank reported its writes). Named by the metadata it returns, or, where
    that leaves them out (torch 2.11 returns it without its storage data; the file on disk has it), listed."""
    if metadata.storage_data is not None:
        return {info.relative_path for info in metadata.storage_data.values()} | {METADATA_FILE}
    return set(storage.listdir(directory))


def _written_by(name: str, rank: int) -> bool:
    # DCP's file system writer names each rank's files "__<rank>_<n>.distcp"; its coordinator writes the metadata
    return name.startswith(f"__{rank}_") or (rank == 0 and name == METADATA_FILE)


def _digests(directory: str | os.PathLike, names: set[str]) -> dict[str, FileDigest]:
    digests = {}
    for name in sorted(names):
        data = storage.read_bytes(storage.join(directory, name))
        digests[name] = FileDigest(len(data), sha256_of(data))
    return digests
