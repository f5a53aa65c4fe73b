"""Files at any location, written crash-consistently: a reader sees a file whole or not at all.

Every URL goes through fsspec; only the commit step of `write_bytes_atomic` differs, chosen per file system by
`atomic_commit_strategy`:

- local disks (`LocalFileSystem`, and a `dir::` view of one): the bytes go to a temporary file in the same
  directory, are fsynced, and the file is renamed onto the final name (`os.replace` is atomic on POSIX and
  Windows), then the directory is fsynced so the rename survives a power cut.
- stores where one `pipe_file` is atomic (an allow-list: `memory://`, S3, GCS, Azure Blob): the whole payload
  goes in one put (or a multipart upload, which is equally invisible until it completes).
- everything else (SFTP, FTP, SMB, HDFS/Arrow, caching wrappers, ...): there `pipe_file` opens the final name
  and streams into it, so the bytes go to a hidden temporary name in the same directory instead, which `fs.mv`
  then renames onto the final name on the server. A file system whose `mv` is fsspec's copy-then-delete
  fallback offers no atomic commit, and the write is refused before anything is written.

A crash leaves either the old file or the new one, never a partial one; at worst a hidden
`.<name>.<random>.tmp` file stays behind.
"""

from __future__ import annotations

import contextlib
import enum
import os
import threading
import uuid
from collections.abc import Callable

from fsspec import AbstractFileSystem
from fsspec.implementations.dirfs import DirFileSystem
from fsspec.implementations.local import LocalFileSystem

from tracktrain.storage.filesystems import OBJECT_STORE_PROTOCOLS, open_filesystem, protocols_of
from tracktrain.storage.url import PathOrURL

__all__ = [
    "AtomicCommit",
    "atomic_commit_strategy",
    "create_exclusive",
    "exists",
    "file_sizes",
    "isdir",
    "listdir",
    "makedirs",
    "read_bytes",
    "remove",
    "write_bytes",
    "write_bytes_atomic",
    "write_file_atomic",
]

BytesLike = bytes | bytearray | memoryview


class AtomicCommit(enum.Enum):
    """How `write_bytes_atomic` makes a file appear whole on a given file system."""

    REPLACE_LOCAL_FILE = "temporary file + fsync + os.replace"
    SINGLE_PUT = "one pipe_file call"
    MOVE_TEMPORARY = "pipe_file to a temporary name + server-side mv"


# fsspec's MemoryFileSystem stores the finished buffer under the name in one dict assignment, as an object store
# publishes an object in one step.
_SINGLE_PUT_PROTOCOLS = OBJECT_STORE_PROTOCOLS | {"memory"}


def atomic_commit_strategy(fs: AbstractFileSystem) -> AtomicCommit:
    """How to commit a file atomically on `fs`; NotImplementedError when `fs` offers no atomic commit."""
    if isinstance(fs, DirFileSystem):
        return atomic_commit_strategy(fs.fs)  # a directory view commits as the file system it views does
    if isinstance(fs, LocalFileSystem):
        return AtomicCommit.REPLACE_LOCAL_FILE
    if protocols_of(fs) & _SINGLE_PUT_PROTOCOLS:
        return AtomicCommit.SINGLE_PUT
    # fsspec's default mv copies then deletes, which streams into the final name just like pipe_file does; a
    # file system that overrides it (SFTP, FTP, SMB, WebHDFS, Arrow/HDFS, local) renames on the server instead.
    # A bound method is compared, not the class attribute, because caching wrappers forward mv to their target.
    if getattr(fs.mv, "__func__", None) is AbstractFileSystem.mv:
        raise NotImplementedError(
            f"Atomic writes are not available on {type(fs).__name__} (protocol {fs.protocol!r}): one put there is "
            "not known to be atomic and its mv copies then deletes instead of renaming, so a crash could leave a "
            "partial file under the final name. Write to a local path or to s3://, gs://, abfs:// or memory://, "
            "or accept in-place writes (storage.write_bytes, or atomic=False on the checkpoint saver)."
        )
    return AtomicCommit.MOVE_TEMPORARY


def write_bytes_atomic(url: PathOrURL, data: BytesLike) -> None:
    """Write `data` to `url` so that readers see either the previous content or all of `data`, never a part.

    On any exception (including KeyboardInterrupt) the temporary file is removed and `url` is unchanged.
    """
    write_file_atomic(*open_filesystem(url), data)


def write_file_atomic(
    fs: AbstractFileSystem, path: str, data: BytesLike, *, before_commit: Callable[[], None] | None = None
) -> None:
    """`write_bytes_atomic` for a file system object already at hand (for instance a `DirFileSystem`, whose
    `dir::` URLs fsspec does not resolve). `before_commit` is called once `data` is written, just before it replaces
    what `path` names (on a store of single puts: before that put): there a checkpoint saved under the same name
    stops being committed, so a crash never leaves its manifest over other data."""
    while isinstance(fs, DirFileSystem):  # commit on the viewed file system, so a local disk gets its fsyncs
        fs, path = fs.fs, fs._join(path)
    strategy = atomic_commit_strategy(fs)
    if strategy is AtomicCommit.REPLACE_LOCAL_FILE:
        _replace_local_file(path, data, before_commit)
    elif strategy is AtomicCommit.SINGLE_PUT:
        if before_commit is not None:
            before_commit()
        fs.pipe_file(path, bytes(data))
    else:
        _move_temporary_into_place(fs, path, data, before_commit)


def write_bytes(url: PathOrURL, data: BytesLike) -> None:
    """Write `data` to `url` in place. On a local disk a crash mid-write can leave a truncated file; prefer
    `write_bytes_atomic` unless the target's name is itself temporary."""
    fs, path = open_filesystem(url)
    if isinstance(fs, LocalFileSystem):
        with open(path, "wb") as f:
            f.write(data)
    else:
        fs.pipe_file(path, bytes(data))


def create_exclusive(url: PathOrURL, data: BytesLike) -> bool:
    """Create the file `url` holding `data` unless a file of that name exists: True when this call created it,
    False (nothing written) when one was there. Of callers racing to create it, exactly one gets True.

    Only where the file system can decide that: on a local disk (`os.open` with O_CREAT | O_EXCL, then one write
    and an fsync, so for that instant a reader can find the file empty) and in `memory://` (which only this process
    sees: a lock decides). Elsewhere NotImplementedError: object stores offer no create-if-absent in general.
    """
    fs, path = open_filesystem(url)
    while isinstance(fs, DirFileSystem):
        fs, path = fs.fs, fs._join(path)
    if isinstance(fs, LocalFileSystem):
        return _create_local_file(path, data)
    if "memory" in protocols_of(fs):
        with _MEMORY_CREATE_LOCK:
            if fs.exists(path):
                return False
            fs.pipe_file(path, bytes(data))
            return True
    raise NotImplementedError(
        f"No exclusive create on {type(fs).__name__} (protocol {fs.protocol!r}): only local disks and memory:// "
        "offer one. Write the file, then read it back to see who won."
    )


_MEMORY_CREATE_LOCK = threading.Lock()


def read_bytes(url: PathOrURL) -> bytes:
    """The whole content of the file at `url`; FileNotFoundError naming `url` when there is none."""
    fs, path = open_filesystem(url)
    try:
        return fs.cat_file(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"No file at {os.fspath(url)}.") from None


def exists(url: PathOrURL) -> bool:
    fs, path = open_filesystem(url)
    return fs.exists(path)


def isdir(url: PathOrURL) -> bool:
    fs, path = open_filesystem(url)
    return fs.isdir(path)


def makedirs(url: PathOrURL) -> None:
    """Create the directory `url` and its parents if missing (on object stores: the bucket, if missing)."""
    fs, path = open_filesystem(url)
    fs.makedirs(path, exist_ok=True)


def remove(url: PathOrURL, missing_ok: bool = False) -> None:
    """Delete the file at `url`."""
    fs, path = open_filesystem(url)
    try:
        fs.rm_file(path)
    except FileNotFoundError:
        if not missing_ok:
            raise FileNotFoundError(f"No file at {os.fspath(url)} to remove.") from None


def listdir(url: PathOrURL) -> list[str]:
    """Sorted names (not paths) of the files directly in the directory `url`; FileNotFoundError if it is absent."""
    fs, path = open_filesystem(url)
    fs.invalidate_cache(path)  # another process may have written since this file system object last listed it
    try:
        entries = fs.ls(path, detail=True)
    except FileNotFoundError:
        raise FileNotFoundError(f"No directory at {os.fspath(url)}.") from None
    return sorted(entry["name"].rstrip("/").rsplit("/", 1)[-1] for entry in entries if entry["type"] == "file")


def file_sizes(url: PathOrURL) -> dict[str, int]:
    """Name -> size of the files directly in the directory `url`, from one listing (one request on an object
    store); fsspec's FileNotFoundError when the directory is absent."""
    fs, path = open_filesystem(url)
    fs.invalidate_cache(path)  # another process (the run before a crash) wrote here
    entries = fs.ls(path, detail=True)
    return {
        entry["name"].rstrip("/").rsplit("/", 1)[-1]: int(entry.get("size") or 0)
        for entry in entries
        if entry["type"] == "file"
    }


def subdirectories(url: PathOrURL) -> list[str]:
    """Sorted names of the directories directly in the directory `url` (on an object store: the prefixes that hold
    objects); [] when it is absent."""
    fs, path = open_filesystem(url)
    fs.invalidate_cache(path)
    try:
        entries = fs.ls(path, detail=True)
    except FileNotFoundError:
        return []
    return sorted(entry["name"].rstrip("/").rsplit("/", 1)[-1] for entry in entries if entry["type"] == "directory")


def remove_tree(url: PathOrURL) -> None:
    """Delete the directory `url` and everything in it; nothing when it is absent."""
    fs, path = open_filesystem(url)
    fs.invalidate_cache(path)
    try:
        fs.rm(path, recursive=True)
    except FileNotFoundError:
        pass


def _temporary_name(name: str) -> str:
    # Hidden, and without the target's extension, so listings of checkpoints never pick it up.
    return f".{name}.{uuid.uuid4().hex[:12]}.tmp"


def _move_temporary_into_place(
    fs: AbstractFileSystem, path: str, data: BytesLike, before_commit: Callable[[], None] | None = None
) -> None:
    directory, separator, name = path.rpartition(fs.sep)
    temporary = directory + separator + _temporary_name(name)  # same directory: the mv is a rename, not a copy
    try:
        fs.pipe_file(temporary, bytes(data))
        if before_commit is not None:
            before_commit()
        fs.mv(temporary, path)
    except BaseException:
        with contextlib.suppress(Exception):  # the temporary may never have been created
            fs.rm_file(temporary)
        raise


def _replace_local_file(path: str, data: BytesLike, before_commit: Callable[[], None] | None = None) -> None:
    directory, name = os.path.split(path)
    temporary = os.path.join(directory, _temporary_name(name))  # same directory: the rename stays on one disk
    try:
        f = open(temporary, "xb")
    except FileNotFoundError:
        raise FileNotFoundError(
            f"Cannot write {path}: the directory {directory} does not exist. Create it first."
        ) from None
    try:
        with f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # the bytes are on disk before the name points at them
        if before_commit is not None:
            before_commit()
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise
    _fsync_directory(directory)


def _create_local_file(path: str, data: BytesLike) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    except FileExistsError:
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):  # no half-written file under the name
            os.remove(path)
        raise
    _fsync_directory(os.path.dirname(path) or ".")
    return True


def _fsync_directory(directory: str) -> None:
    """Make a rename in `directory` durable. Not possible on Windows, nor needed there."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):  # some file systems do not support fsync on directories
            os.fsync(fd)
    finally:
        os.close(fd)
