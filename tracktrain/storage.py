"""Files at any fsspec URL (a local path, `file://`, `memory://`, `s3://`, `gs://`, ...), written crash-consistently.

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

Credentials and other storage options come from fsspec's own configuration (environment variables,
`fsspec.config`, the provider's credential chain); this module takes none, so none can leak into what it writes.
Its error messages leave them out too: URL passwords and the values of secret-named variables and options are
replaced by `***`.

Bad input fails early and says what to do: `open_filesystem` names the package to install for a protocol whose
driver is missing, and `storage_check.check_writable` (called before training starts) turns a missing bucket, rejected
credentials, a read-only directory or a wrong endpoint into one error naming the URL, the failure and the fix.
"""

from __future__ import annotations

import contextlib
import difflib
import enum
import importlib.util
import os
import re
import threading
import uuid
from collections.abc import Callable
from typing import Union

import fsspec
import fsspec.config
from fsspec import AbstractFileSystem
from fsspec.implementations.dirfs import DirFileSystem
from fsspec.implementations.local import LocalFileSystem
from fsspec.registry import known_implementations

from tracktrain.env_settings import positive_setting
from tracktrain.redaction import redact

__all__ = [
    "AtomicCommit",
    "atomic_commit_strategy",
    "OBJECT_STORE_PROTOCOLS",
    "create_exclusive",
    "exists",
    "is_local",
    "isdir",
    "join",
    "listdir",
    "protocols_of",
    "makedirs",
    "open_filesystem",
    "read_bytes",
    "remove",
    "write_bytes",
    "write_bytes_atomic",
    "write_file_atomic",
]

PathOrURL = Union[str, "os.PathLike[str]"]
BytesLike = Union[bytes, bytearray, memoryview]


def open_filesystem(url: PathOrURL) -> tuple[AbstractFileSystem, str]:
    """The fsspec file system serving `url`, and the path of `url` on it.

    ValueError when fsspec knows no protocol of `url`; ImportError naming the package to install when it knows
    the protocol but its driver is not installed.
    """
    if not isinstance(url, (str, os.PathLike)):
        raise TypeError(f"Expected a path or an fsspec URL (str or os.PathLike), got {type(url).__name__}: {url!r}.")
    url = os.fspath(url)
    bounded = _bounded_client_options(url)
    try:
        fs, path = fsspec.core.url_to_fs(url, **bounded)
    except (ValueError, ImportError) as error:
        protocol_error = _protocol_error(url)
        if protocol_error is None:  # the protocols are fine: some other problem, fsspec's message says which
            raise
        raise protocol_error from error
    if bounded and isinstance(getattr(fs, "retries", None), int):
        fs.retries = 1  # s3fs would repeat botocore's bounded tries 5 times over: botocore's are the only ones
    return fs, path


# How long one request to an object store may take, and how often it is tried: a hung or unreachable store must
# fail a call within about a minute and a half (3 tries of at most 10 s to connect and 30 s to answer), not after
# botocore's defaults (60 s read timeout, 5 tries: 7 minutes seen listing a hung store). Settable per run with
# these variables, or per key in fsspec's configuration (`fsspec.config.conf["s3"]["config_kwargs"]`), which wins.
CONNECT_TIMEOUT_VARIABLE = "TRACKTRAIN_STORAGE_CONNECT_TIMEOUT"
READ_TIMEOUT_VARIABLE = "TRACKTRAIN_STORAGE_READ_TIMEOUT"
ATTEMPTS_VARIABLE = "TRACKTRAIN_STORAGE_ATTEMPTS"
_DEFAULT_CONNECT_TIMEOUT, _DEFAULT_READ_TIMEOUT, _DEFAULT_ATTEMPTS = 10.0, 30.0, 3


def storage_timeouts() -> tuple[float, float, int]:
    """(connect timeout s, read timeout s, attempts) for object-store requests: the variables above, or defaults."""
    connect = positive_setting(CONNECT_TIMEOUT_VARIABLE, _DEFAULT_CONNECT_TIMEOUT, float, "seconds")
    read = positive_setting(READ_TIMEOUT_VARIABLE, _DEFAULT_READ_TIMEOUT, float, "seconds")
    attempts = positive_setting(ATTEMPTS_VARIABLE, _DEFAULT_ATTEMPTS, int)
    return connect, read, attempts


def _bounded_client_options(url: str) -> dict:
    """Storage options that bound each request's time and tries, for the protocols whose clients wait long by
    default (S3 through s3fs/botocore). What the user configured for a key (fsspec config, AWS_MAX_ATTEMPTS,
    AWS_RETRY_MODE) is kept."""
    protocols = _url_protocols(url)
    if len(protocols) != 1 or protocols[0] not in ("s3", "s3a"):
        return {}
    connect, read, attempts = storage_timeouts()
    bounded: dict = {"connect_timeout": connect, "read_timeout": read}
    if not (os.environ.get("AWS_MAX_ATTEMPTS") or os.environ.get("AWS_RETRY_MODE")):
        bounded["retries"] = {"max_attempts": attempts, "mode": "standard"}  # with backoff between tries
    configured = fsspec.config.conf.get(protocols[0], {}).get("config_kwargs", {})
    return {"config_kwargs": {**bounded, **configured}}


# Shown when a protocol is unknown; `fsspec.available_protocols()` has all of them (about 60).
_COMMON_PROTOCOLS = ("file", "memory", "s3", "gs", "az", "hf", "http", "sftp")
# Import names that differ from the name to pip-install, for the modules fsspec's own drivers need.
_PIP_NAMES = {"smbclient": "smbprotocol", "libarchive": "libarchive-c"}
_TRACKTRAIN_EXTRAS = {"s3fs": "s3"}


def _protocol_error(url: str) -> Exception | None:
    """The error for the first protocol of `url` (chained ones included) that fsspec cannot serve, or None."""
    for protocol in _url_protocols(url):
        try:
            fsspec.get_filesystem_class(protocol)
        except ValueError:
            known = fsspec.available_protocols()
            close = difflib.get_close_matches(protocol, known, n=1, cutoff=0.5)
            suggestion = f" Did you mean {close[0]}://?" if close else ""
            return ValueError(redact(
                f"Cannot open {url}: fsspec knows no protocol {protocol!r}.{suggestion} Known protocols include "
                f"{', '.join(_COMMON_PROTOCOLS)} (fsspec.available_protocols() lists all {len(known)}); a path "
                "without a protocol is a local file."
            ))
        except ImportError as error:
            package = _missing_package(protocol, error)
            extra = _TRACKTRAIN_EXTRAS.get(package)
            install = f"pip install {package}" + (f" (or pip install 'tracktrain[{extra}]')" if extra else "")
            return ImportError(redact(
                f"Cannot open {url}: the {protocol}:// protocol needs the package {package}, which is not "
                f"installed (fsspec says: {error}). Install it: {install}."
            ), name=package)
    return None


def _url_protocols(url: str) -> list[str]:
    """The protocols of a URL, outermost first: `simplecache::s3://b/k` -> ['simplecache', 's3']."""
    chained = "::" in url
    protocols = []
    for part in url.split("::"):
        protocol = fsspec.core.split_protocol(part)[0]
        if protocol is None and chained and re.fullmatch(r"[a-z][a-z0-9_]*", part):
            protocol = part  # fsspec reads a bare word in a chain as a protocol (`simplecache::...`)
        if protocol:
            protocols.append(protocol)
    return protocols


def _missing_package(protocol: str, error: ImportError) -> str:
    """The package to pip-install so that fsspec can load the driver of `protocol`."""
    driver = known_implementations.get(protocol, {}).get("class", "").split(".")[0]  # "gcsfs" for gs://
    if driver and driver != "fsspec" and not _importable(driver):
        return driver
    # The driver is installed (or ships with fsspec) but a module it imports is not: name that one.
    missing = (getattr(error.__cause__, "name", None) or driver).split(".")[0]
    return _PIP_NAMES.get(missing, missing)


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: blocked with sys.modules[module] = None
        return False


def is_local(url: PathOrURL) -> bool:
    """Whether `url` is on the local file system (a plain path or a `file://` URL)."""
    fs, _ = open_filesystem(url)
    return isinstance(fs, LocalFileSystem)


def local_dir(root_dir: PathOrURL) -> str:
    """The local directory that stands in for a run's root dir where a file must be local (CSV logs, tracker spill
    files, the embedded MLflow database, W&B's and TensorBoard's folders): the root itself when it is local (a
    `file://` URL as its path), else `.tracktrain` in the working directory, never a folder named after a URL."""
    fs, path = open_filesystem(root_dir)
    if isinstance(fs, LocalFileSystem):
        return path if "://" in os.fspath(root_dir) else os.fspath(root_dir)
    return os.path.join(os.getcwd(), ".tracktrain")


def join(url: PathOrURL, name: str) -> str:
    """`url` with `name` appended as one more path component, keeping the URL's protocol."""
    url = os.fspath(url)
    if "://" not in url:
        return os.path.join(url, name)
    return url + name if url.endswith("/") else f"{url}/{name}"


class AtomicCommit(enum.Enum):
    """How `write_bytes_atomic` makes a file appear whole on a given file system."""

    REPLACE_LOCAL_FILE = "temporary file + fsync + os.replace"
    SINGLE_PUT = "one pipe_file call"
    MOVE_TEMPORARY = "pipe_file to a temporary name + server-side mv"


# Object stores: buckets of objects, no real directories. Each one's pipe_file publishes an object in one step,
# so no reader ever sees a part of it:
OBJECT_STORE_PROTOCOLS = frozenset({
    "s3", "s3a",  # S3 PutObject / CompleteMultipartUpload make the object visible only once complete
    "gs", "gcs",  # a GCS (resumable) upload creates the object only when it is finalized
    "abfs", "abfss", "az",  # Azure block blobs: blocks are staged, then Put Block List commits them at once
})
# ... and fsspec's MemoryFileSystem, which stores the finished buffer under the name in one dict assignment.
_SINGLE_PUT_PROTOCOLS = OBJECT_STORE_PROTOCOLS | {"memory"}


def protocols_of(fs: AbstractFileSystem) -> set[str]:
    """The protocols `fs` answers to (fsspec gives one name or a tuple)."""
    return {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)


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


def write_file_atomic(fs: AbstractFileSystem, path: str, data: BytesLike, *,
                      before_commit: Callable[[], None] | None = None) -> None:
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


def _temporary_name(name: str) -> str:
    # Hidden, and without the target's extension, so listings of checkpoints never pick it up.
    return f".{name}.{uuid.uuid4().hex[:12]}.tmp"


def _move_temporary_into_place(fs: AbstractFileSystem, path: str, data: BytesLike,
                               before_commit: Callable[[], None] | None = None) -> None:
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
