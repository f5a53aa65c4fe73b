"""Where checkpoints go: save handlers over `tracktrain.storage` (one code path for every fsspec URL).

Only the rank `save_on_rank` writes and deletes, as `tracktrain.distributed.ranks` tells the rank: from the process group, or
before it exists from torchrun's RANK, so that no other rank of a starting run creates or checks the directory."""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import shutil
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from tracktrain import storage
from tracktrain.checkpoint.manifest import is_plain_name, manifest_name, remove_checkpoint, write_manifest
from tracktrain.checkpoint.spool import Spool, spool_dir_for
from tracktrain.distributed.logger import get_dist_logger
from tracktrain.distributed.ranks import global_rank
from tracktrain.storage.check import is_unreachable

__all__ = [
    "BaseSaveHandler",
    "CheckpointSkipped",
    "CheckpointWriteError",
    "DiskSaver",
    "FsspecSaver",
    "deliver_left_over",
]


class CheckpointSkipped(RuntimeError):
    """A checkpoint was not written because its store did not answer, and nothing of it is left: training goes on,
    and the next save tries again. (A saver that cannot keep the checkpoint until the store answers raises it: the
    sharded one, whose shards are on every rank. Saved in the loop, `Checkpoint` warns, keeps its list as it was, and
    goes on; saved in the background (`AsyncSaver`), the list already names it, and what was queued for it — its
    retention, its callbacks — is dropped: the next run's start counts only what is committed.)"""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (disk full, quota, a file-size limit, a store that refused it). Nothing of
    it is left, and the checkpoints written before are untouched. The message names the file, the directory, the
    space left there (on a local disk) and what to do; `errno` is the original error's."""

    reason: str
    directory: str
    size: int

    def __init__(self, error: OSError, filename: str, directory: str, size: int, when: str = "") -> None:
        reason: str = error.strerror or str(error) or type(error).__name__
        if isinstance(error, CheckpointWriteError):
            reason = error.reason
        free = _free_space(directory)
        self.reason, self.directory, self.size = reason, directory, size
        super().__init__(
            error.errno,
            (
                f"Could not write checkpoint {filename} ({_megabytes(size)}) to {directory}{f' {when}' if when else ''}: "
                f"{reason}"
                f"{f'; {_megabytes(free)} free there' if free is not None else ''}. What it had written was removed; the "
                "checkpoints saved before it are intact. Free space there, keep fewer checkpoints "
                "(ModelCheckpoint(save_top_k=..., save_last=...)), or save elsewhere (ModelCheckpoint(dirpath=...))."
            ),
        )


def _free_space(directory: str) -> int | None:
    if not storage.is_local(directory):
        return None
    try:
        return shutil.disk_usage(storage.local_dir(directory)).free
    except OSError:
        return None


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size:,} bytes"


class BaseSaveHandler(ABC):
    """Stores what `Checkpoint` hands over. Any object with these two methods works as a save handler."""

    @abstractmethod
    def __call__(self, checkpoint: Mapping, filename: str, metadata: Mapping | None = None) -> None:
        """Store `checkpoint` (state dicts) under `filename`. `metadata` has `basename`, `score_name`, `priority`."""

    @abstractmethod
    def remove(self, filename: str) -> None:
        """Delete what was stored under `filename`."""


class FsspecSaver(BaseSaveHandler):
    """Saves checkpoints with `torch.save` into a directory at any fsspec URL, atomically.

    Each file is serialized into host memory first (as much memory as the checkpoint itself), so that a failure
    while serializing never touches storage, and is then committed with `tracktrain.storage.write_bytes_atomic`.

    Args:
        url: the directory: a local path, `file://...`, `memory://...`, `s3://bucket/prefix`, ...
        atomic: commit each file atomically (see module docstring). With False a local file is written in place,
            and a crash mid-write can leave it truncated.
        create_dir: create the directory when missing.
        require_empty: refuse a directory that already holds `.pt` files (so that a new run cannot mix its
            checkpoints with an old run's). Pass False to resume into it.
        save_on_rank: in a torch.distributed run, the only rank that writes and deletes.
        manifest: after each file, write its manifest (size, SHA-256, `summarize(checkpoint)`), which makes it a
            committed checkpoint (see `tracktrain.checkpoint.manifest`); `remove` then deletes the manifest first.
        summarize: `checkpoint -> dict` of JSON values for the manifest's summary (step, epoch, run ids).
        spool: where checkpoints wait while the store does not answer, so that training goes on (see
            `tracktrain.checkpoint.spool`); None: a save the store does not take fails.
        kwargs: passed to `torch.save`.

    Names in `protected` are never removed (the checkpoint a run resumed from).
    """

    def __init__(
        self,
        url: str | os.PathLike,
        atomic: bool = True,
        create_dir: bool = True,
        require_empty: bool = True,
        save_on_rank: int = 0,
        manifest: bool = False,
        summarize: Callable[[Mapping], Mapping[str, Any]] | None = None,
        spool: Spool | None = None,
        **kwargs: Any,
    ) -> None:
        _check_torch_save_kwargs(type(self).__name__, kwargs)
        self.url = os.fspath(url)
        self.spool = spool
        self._atomic = atomic
        self.save_on_rank = save_on_rank
        self.manifest = manifest
        self._summarize = summarize
        self.protected: set[str] = set()
        self.kwargs = kwargs
        if global_rank() == save_on_rank:
            self._check_and_setup(create_dir, require_empty)

    def _check_and_setup(self, create_dir: bool, require_empty: bool) -> None:
        if create_dir:
            storage.makedirs(self.url)
        elif not storage.isdir(self.url):
            raise ValueError(f"Directory path '{self.url}' is not found: create it, or pass create_dir=True.")
        if require_empty:
            try:
                matched = [name for name in storage.listdir(self.url) if name.endswith(".pt")]
            except FileNotFoundError:  # an object store "directory" with nothing in it yet
                matched = []
            if matched:
                raise ValueError(
                    f"Files {matched} with extension '.pt' are already present in the directory {self.url}. "
                    "If you want to use this directory anyway, pass `require_empty=False` (a new run would mix "
                    "its checkpoints with these: to resume from them, or else choose an empty directory)."
                )

    def path_of(self, filename: str) -> str | Path:
        """Where `filename` is stored (what `Checkpoint.last_checkpoint` returns). `filename` must be a plain
        name, so that saving and retention never reach outside the directory."""
        return storage.join(self.url, _check_plain_name(filename))

    def __call__(self, checkpoint: Mapping, filename: str, metadata: Mapping | None = None) -> None:
        if global_rank() != self.save_on_rank:
            return
        data, summary = self.serialize(checkpoint)
        if self.spool is None:
            self.write_serialized(filename, data, summary, metadata)
        elif not self.spool.deliver(self.write_serialized, self.remove_now):
            self.spool.keep(filename, data, summary, metadata)  # behind the ones still waiting, in order
        else:
            try:
                self.write_serialized(filename, data, summary, metadata)
            except Exception as error:
                if not is_unreachable(error):
                    raise
                self.spool.failed_now()
                self.spool.keep(filename, data, summary, metadata, error)

    def serialize(self, checkpoint: Mapping) -> tuple[memoryview, dict[str, Any]]:
        """The checkpoint's bytes and its manifest summary, made completely before storage is touched: a failure
        here cannot damage any file."""
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer, **self.kwargs)
        summary = dict(self._summarize(checkpoint)) if self.manifest and self._summarize is not None else {}
        return buffer.getbuffer(), summary

    def write_serialized(
        self, filename: str, data: bytes | memoryview, summary: Mapping[str, Any], metadata: Mapping | None = None
    ) -> None:
        """Commit what `serialize` made under `filename`: the data, then its manifest. A checkpoint saved before
        under the same name stops being committed (its manifest is deleted) just before its data file is replaced."""
        path = self.path_of(filename)

        def uncommit_replaced() -> None:  # else a crash could leave its manifest over the new data
            if self.manifest:
                storage.remove(storage.join(self.url, manifest_name(filename)), missing_ok=True)

        data_written = False
        try:
            if self._atomic:
                storage.write_file_atomic(*storage.open_filesystem(path), data, before_commit=uncommit_replaced)
            else:
                uncommit_replaced()
                storage.write_bytes(path, data)
            data_written = True
            if self.manifest:  # last: only now is the checkpoint complete
                write_manifest(os.fspath(self.url), {filename: data}, summary, metadata)
        except OSError as error:
            # a checkpoint is complete or absent: what this save wrote is removed (a data file without its manifest,
            # or written in place, is not a checkpoint); an atomic write that failed left the name as it was, and so
            # a checkpoint saved before under it
            if (self.manifest and data_written) or not self._atomic:
                with contextlib.suppress(Exception):
                    storage.remove(path, missing_ok=True)
            raise CheckpointWriteError(error, filename, self.url, len(data)) from error

    def remove(self, filename: str) -> None:
        if global_rank() != self.save_on_rank or filename in self.protected:
            return
        if self.spool is None:
            self.remove_now(filename)
        elif not self.spool.is_empty:
            self.spool.queue_removal(filename)  # after what waits before it (or dropped from the spool)
        else:
            try:
                self.remove_now(filename)
            except Exception as error:
                if not is_unreachable(error):
                    raise
                self.spool.failed_now()
                self.spool.queue_removal(filename)

    def remove_now(self, filename: str) -> None:
        """Delete `filename` (and its manifest) from the directory, whatever waits in the spool."""
        if self.manifest:
            remove_checkpoint(os.fspath(self.url), _check_plain_name(filename))
        else:
            # already gone (deleted by hand, or by a run that crashed after deleting it) is what was wanted
            storage.remove(self.path_of(filename), missing_ok=True)


class DiskSaver(FsspecSaver):
    """`FsspecSaver` for a local directory, as Ignite's DiskSaver: `dirname` is a `Path`, and so is
    `Checkpoint.last_checkpoint`. Same arguments as `FsspecSaver`."""

    def __init__(
        self,
        dirname: str | os.PathLike,
        atomic: bool = True,
        create_dir: bool = True,
        require_empty: bool = True,
        save_on_rank: int = 0,
        manifest: bool = False,
        summarize: Callable[[Mapping], Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> None:
        local = storage.local_path(dirname)  # a file:// URL as its path
        if local is None:
            raise ValueError(
                f"DiskSaver writes to a local directory, got the URL {os.fspath(dirname)!r}. Use "
                "FsspecSaver(url) for other storage, or pass the URL to Checkpoint as save_handler."
            )
        self.dirname = Path(local).expanduser()
        super().__init__(self.dirname, atomic, create_dir, require_empty, save_on_rank, manifest, summarize, **kwargs)

    def path_of(self, filename: str) -> Path:
        return self.dirname / _check_plain_name(filename)


def _check_plain_name(filename: str) -> str:
    """`filename` itself if it is a plain name; ValueError otherwise, since savers write and delete what it
    names."""
    if not is_plain_name(filename):
        raise ValueError(
            f"Checkpoint file name {filename!r} is not a plain file name: savers only write and delete files "
            "directly inside their directory. Use a name without '/', '..' or a leading root (check "
            "filename_prefix and filename_pattern)."
        )
    return filename


def saver_for(dirname: str | os.PathLike, **kwargs: Any) -> FsspecSaver:
    """The saver for a directory or URL: a DiskSaver for local paths, an FsspecSaver for any other URL."""
    saver_class = DiskSaver if storage.is_local(dirname) else FsspecSaver
    return saver_class(dirname, **kwargs)


def make_save_handler(save_handler: Any, save_on_rank: int) -> Any:
    if isinstance(save_handler, (str, os.PathLike)):
        return saver_for(save_handler, create_dir=True, save_on_rank=save_on_rank)
    if callable(save_handler):
        return save_handler
    raise TypeError(
        "Argument `save_handler` should be a string or Path object or callable or inherit from BaseSaveHandler, "
        f"got {type(save_handler).__name__}: {save_handler!r}."
    )


def _check_torch_save_kwargs(owner: str, kwargs: dict[str, Any]) -> None:
    try:
        inspect.signature(torch.save).bind(None, None, **kwargs)
    except TypeError as e:
        raise TypeError(f"{owner} passes its keyword arguments to torch.save, which rejects them: {e}.") from None


def deliver_left_over(url: str, root_dir: str) -> None:
    """Before a run looks for a checkpoint to resume from at `url`: deliver what an earlier run left waiting for it
    (rank 0's spool: call on rank 0). A store that still does not answer is left to the listing, which says so."""
    if storage.is_local(url):
        return
    spool = Spool(spool_dir_for(url, root_dir), url)
    if spool.is_empty:
        return
    get_dist_logger().info(f"Delivering what an earlier run could not write to {url}: {spool.behind()}")
    try:
        saver = FsspecSaver(url, require_empty=False, manifest=True)
    except Exception:  # noqa: BLE001 - the store does not answer: the listing that follows says so, clearly
        return
    spool.deliver(saver.write_serialized, saver.remove_now, force=True)
