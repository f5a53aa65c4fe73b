"""Files at any fsspec URL (a local path, `file://`, `memory://`, `s3://`, `gs://`, ...), written crash-consistently.

Every URL goes through fsspec; only the commit step differs by kind of storage:

- local file systems: the bytes go to a temporary file in the same directory, are fsynced, and the file is
  renamed onto the final name (`os.replace` is atomic on POSIX and Windows), then the directory is fsynced so
  the rename survives a power cut. A crash leaves either the old file or the new one, never a partial one;
  at worst a hidden `.<name>.<random>.tmp` file stays behind.
- everything else (object stores, `memory://`): the whole payload is written with one `pipe_file` call, a
  single PUT (or a multipart upload, which is equally invisible until it completes), so a partial object is
  never visible.

Credentials and other storage options come from fsspec's own configuration (environment variables,
`fsspec.config`, the provider's credential chain); this module takes none, so none can leak into what it writes.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import TYPE_CHECKING, Union

import fsspec
from fsspec.implementations.local import LocalFileSystem

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

__all__ = [
    "exists",
    "is_local",
    "isdir",
    "join",
    "listdir",
    "makedirs",
    "open_filesystem",
    "read_bytes",
    "remove",
    "write_bytes",
    "write_bytes_atomic",
]

PathOrURL = Union[str, "os.PathLike[str]"]
BytesLike = Union[bytes, bytearray, memoryview]


def open_filesystem(url: PathOrURL) -> tuple[AbstractFileSystem, str]:
    """The fsspec file system serving `url`, and the path of `url` on it."""
    if not isinstance(url, (str, os.PathLike)):
        raise TypeError(f"Expected a path or an fsspec URL (str or os.PathLike), got {type(url).__name__}: {url!r}.")
    return fsspec.core.url_to_fs(os.fspath(url))


def is_local(url: PathOrURL) -> bool:
    """Whether `url` is on the local file system (a plain path or a `file://` URL)."""
    fs, _ = open_filesystem(url)
    return isinstance(fs, LocalFileSystem)


def join(url: PathOrURL, name: str) -> str:
    """`url` with `name` appended as one more path component, keeping the URL's protocol."""
    url = os.fspath(url)
    if "://" not in url:
        return os.path.join(url, name)
    return url + name if url.endswith("/") else f"{url}/{name}"


def write_bytes_atomic(url: PathOrURL, data: BytesLike) -> None:
    """Write `data` to `url` so that readers see either the previous content or all of `data`, never a part.

    On any exception (including KeyboardInterrupt) the temporary file is removed and `url` is unchanged.
    """
    fs, path = open_filesystem(url)
    if isinstance(fs, LocalFileSystem):
        _replace_local_file(path, data)
    else:
        fs.pipe_file(path, bytes(data))  # one PUT: the object appears whole or not at all


def write_bytes(url: PathOrURL, data: BytesLike) -> None:
    """Write `data` to `url` in place. On a local disk a crash mid-write can leave a truncated file; prefer
    `write_bytes_atomic` unless the target's name is itself temporary."""
    fs, path = open_filesystem(url)
    if isinstance(fs, LocalFileSystem):
        with open(path, "wb") as f:
            f.write(data)
    else:
        fs.pipe_file(path, bytes(data))


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


def _replace_local_file(path: str, data: BytesLike) -> None:
    directory, name = os.path.split(path)
    # Same directory as the target, so the rename never crosses file systems; hidden, and without the target's
    # extension, so listings of checkpoints never pick it up.
    temporary = os.path.join(directory, f".{name}.{uuid.uuid4().hex[:12]}.tmp")
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
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise
    _fsync_directory(directory)


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
