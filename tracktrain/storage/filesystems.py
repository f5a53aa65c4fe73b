"""The fsspec file system serving a location, with bounded request times on object stores, and what is local.

Credentials and other storage options come from fsspec's own configuration (environment variables,
`fsspec.config`, the provider's credential chain); nothing here takes any, so none can leak into what is written.
A protocol whose driver is missing fails with the package to install.
"""

from __future__ import annotations

import difflib
import importlib.util
import os

import fsspec
import fsspec.config
from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem
from fsspec.registry import known_implementations

from tracktrain.checks.environment import positive_setting
from tracktrain.storage.redaction import redact
from tracktrain.storage.url import PathOrURL, is_url, url_protocols

__all__ = [
    "ATTEMPTS_VARIABLE",
    "CONNECT_TIMEOUT_VARIABLE",
    "OBJECT_STORE_PROTOCOLS",
    "READ_TIMEOUT_VARIABLE",
    "innermost",
    "is_local",
    "local_dir",
    "local_path",
    "open_filesystem",
    "protocols_of",
    "storage_timeouts",
]


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
    attempts = int(positive_setting(ATTEMPTS_VARIABLE, _DEFAULT_ATTEMPTS, int))  # an int already: for the types
    return connect, read, attempts


def _bounded_client_options(url: str) -> dict:
    """Storage options that bound each request's time and tries, for the protocols whose clients wait long by
    default (S3 through s3fs/botocore). What the user configured for a key (fsspec config, AWS_MAX_ATTEMPTS,
    AWS_RETRY_MODE) is kept."""
    protocols = url_protocols(url)
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
    for protocol in url_protocols(url):
        try:
            fsspec.get_filesystem_class(protocol)
        except ValueError:
            known = fsspec.available_protocols()
            close = difflib.get_close_matches(protocol, known, n=1, cutoff=0.5)
            suggestion = f" Did you mean {close[0]}://?" if close else ""
            return ValueError(
                redact(
                    f"Cannot open {url}: fsspec knows no protocol {protocol!r}.{suggestion} Known protocols include "
                    f"{', '.join(_COMMON_PROTOCOLS)} (fsspec.available_protocols() lists all {len(known)}); a path "
                    "without a protocol is a local file."
                )
            )
        except ImportError as error:
            package = _missing_package(protocol, error)
            extra = _TRACKTRAIN_EXTRAS.get(package)
            install = f"pip install {package}" + (f" (or pip install 'tracktrain[{extra}]')" if extra else "")
            return ImportError(
                redact(
                    f"Cannot open {url}: the {protocol}:// protocol needs the package {package}, which is not "
                    f"installed (fsspec says: {error}). Install it: {install}."
                ),
                name=package,
            )
    return None


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
    """Whether `url` is on the local file system (a plain path or a `file://` URL), as fsspec resolves it."""
    fs, _ = open_filesystem(url)
    return isinstance(fs, LocalFileSystem)


def local_path(url: PathOrURL) -> str | None:
    """`url` as a local path: a plain path as it is written (relative, `~` and all), a `file://` URL as its path;
    None when `url` is not on the local file system."""
    fs, path = open_filesystem(url)
    if not isinstance(fs, LocalFileSystem):
        return None
    return path if is_url(url) else os.fspath(url)


def local_dir(root_dir: PathOrURL) -> str:
    """The local directory that stands in for a run's root dir where a file must be local (CSV logs, tracker spill
    files, the embedded MLflow database, W&B's and TensorBoard's folders): the root itself when it is local (a
    `file://` URL as its path), else `.tracktrain` in the working directory, never a folder named after a URL."""
    path = local_path(root_dir)
    return os.path.join(os.getcwd(), ".tracktrain") if path is None else path


# Object stores: buckets of objects, no real directories. Each one's pipe_file publishes an object in one step,
# so no reader ever sees a part of it:
OBJECT_STORE_PROTOCOLS = frozenset(
    {
        "s3",
        "s3a",  # S3 PutObject / CompleteMultipartUpload make the object visible only once complete
        "gs",
        "gcs",  # a GCS (resumable) upload creates the object only when it is finalized
        "abfs",
        "abfss",
        "az",  # Azure block blobs: blocks are staged, then Put Block List commits them at once
    }
)


def protocols_of(fs: AbstractFileSystem) -> set[str]:
    """The protocols `fs` answers to (fsspec gives one name or a tuple)."""
    return {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)


def innermost(fs: AbstractFileSystem) -> AbstractFileSystem:
    """The file system that a wrapper (`simplecache::`, `dir::`, ...) ultimately reads and writes."""
    while isinstance(getattr(fs, "fs", None), AbstractFileSystem):
        fs = fs.fs
    return fs
