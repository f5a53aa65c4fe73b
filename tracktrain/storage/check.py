"""Storage that fails says why: `check_writable` proves, before a run writes anything, that it can (or fails with
the cause and the fix); `storage_failure` turns a failed call into such an error; `is_unreachable` tells a store
that did not answer from one that refused."""

from __future__ import annotations

import contextlib
import errno
import os
import time
import uuid
from typing import Any, NoReturn

from fsspec import AbstractFileSystem
from fsspec.asyn import AsyncFileSystem, sync
from fsspec.implementations.local import LocalFileSystem

from tracktrain.storage.filesystems import (
    ATTEMPTS_VARIABLE,
    CONNECT_TIMEOUT_VARIABLE,
    OBJECT_STORE_PROTOCOLS,
    READ_TIMEOUT_VARIABLE,
    innermost,
    open_filesystem,
    protocols_of,
    storage_timeouts,
)
from tracktrain.storage.redaction import is_secret_free, redact

__all__ = ["PROBE_PREFIX", "check_writable", "is_unreachable", "raise_storage_failure", "storage_failure"]

PROBE_PREFIX = ".tracktrain-write-probe-"  # + 12 hex digits; one a kill left is removed by the next run's checkpointer


def check_writable(url: str | os.PathLike, *, timeout: float = 30.0) -> None:
    """Fail now, with the cause and the fix, if files cannot be written, read back and deleted under `url`.

    Creates the directory `url` (on object stores the bucket must exist: it is never created implicitly), then
    writes, reads and deletes a small hidden probe file, one round trip each, so that a missing bucket, missing
    or rejected credentials, a read-only directory or a wrong endpoint stop a run before training starts rather
    than at its first checkpoint. On file systems served over asyncio (S3, GCS, Azure, HTTP) the whole check
    takes at most `timeout` seconds; how often the client itself retries is the user's setting (for S3:
    AWS_MAX_ATTEMPTS, AWS_RETRY_MODE).

    Raises FileNotFoundError (missing bucket), PermissionError (credentials, permissions, read-only file
    system), ConnectionError or TimeoutError (endpoint), or OSError (anything else, or a probe read back
    different from what was written); plus `open_filesystem`'s ValueError / ImportError for a bad protocol.
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}.")
    fs, path = open_filesystem(url)
    url = os.fspath(url)
    probe = f"{path.rstrip(fs.sep)}{fs.sep}{PROBE_PREFIX}{uuid.uuid4().hex[:12]}"
    payload = b"tracktrain write probe\n"
    deadline = time.monotonic() + timeout
    step, written = "creating the directory", False
    try:
        if not protocols_of(innermost(fs)) & OBJECT_STORE_PROTOCOLS:  # there makedirs would create the bucket
            _call_before(deadline, fs, "makedirs", path, exist_ok=True)
        step = "writing a probe file"
        _call_before(deadline, fs, "pipe_file", probe, payload)
        step, written = "reading the probe file back", True
        content = _call_before(deadline, fs, "cat_file", probe)
        step = "deleting the probe file"
        _call_before(deadline, fs, "rm_file", probe)
    except Exception as error:
        if written and step != "deleting the probe file":
            with contextlib.suppress(Exception):
                _call_before(deadline, fs, "rm_file", probe)
        raise _failure(url, fs, path, step, error, f"No answer within {timeout:g} s.", "write to") from (
            error if is_secret_free(error, fs) else None
        )
    if content != payload:
        raise OSError(
            redact(
                f"Cannot write to {url}: a probe file read back {len(content)} bytes that differ from the {len(payload)} "
                "written. Check what sits between this process and the storage (a caching layer, a proxy).",
                fs,
            )
        )


def _call_before(deadline: float, fs: AbstractFileSystem, method: str, *args: Any, **kwargs: Any) -> Any:
    """`fs.<method>(*args, **kwargs)`; on an asyncio file system, cancelled by fsspec when `deadline` passes."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("no time left")
    if isinstance(fs, AsyncFileSystem):
        return sync(fs.loop, getattr(fs, f"_{method}"), *args, timeout=remaining, **kwargs)
    return getattr(fs, method)(*args, **kwargs)  # local disks answer at once; other sync clients have their own


# Exceptions recognised by class name, so that no provider's client library is imported to classify them.
_TIMEOUT_ERRORS = {"TimeoutError", "ConnectTimeoutError", "ReadTimeoutError", "ServerTimeoutError"}
_CONNECTION_ERRORS = {"ConnectionError", "ClientConnectionError"}  # builtin, botocore's and aiohttp's bases
_CREDENTIAL_ERRORS = {
    "NoCredentialsError",
    "PartialCredentialsError",
    "CredentialRetrievalError",  # botocore
    "DefaultCredentialsError",
    "RefreshError",  # google-auth
    "ClientAuthenticationError",  # azure-core
}


def is_unreachable(error: BaseException) -> bool:
    """Whether `error` (or one it was raised from) says the store did not answer: a timeout or a connection that
    failed, as opposed to an answer that refused (credentials, a missing bucket) or a local fault."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        names = {cls.__name__ for cls in type(current).__mro__}
        if names & (_TIMEOUT_ERRORS | _CONNECTION_ERRORS):
            return True
        current = current.__cause__ or current.__context__
    return False


# The fix for each kind of failure, per provider; `None` holds what fits any other file system.
_FIXES = {
    "s3": {
        "bucket": "Create the bucket (aws s3 mb s3://{bucket}) or correct its name.",
        "credentials": (
            "Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (plus AWS_SESSION_TOKEN for temporary credentials) "
            "or AWS_PROFILE, and allow s3:PutObject, s3:GetObject and s3:DeleteObject on the bucket."
        ),
        "endpoint": (
            "Check AWS_ENDPOINT_URL ({endpoint}) and that the server answers; AWS_MAX_ATTEMPTS and AWS_RETRY_MODE "
            "set how often botocore retries."
        ),
    },
    "gs": {
        "bucket": "Create the bucket (gcloud storage buckets create gs://{bucket}) or correct its name.",
        "credentials": (
            "Set GOOGLE_APPLICATION_CREDENTIALS to a service account key file or run `gcloud auth "
            "application-default login`, and allow storage.objects.create, get and delete on the bucket."
        ),
        "endpoint": "Check the network path to Google Cloud Storage (or STORAGE_EMULATOR_HOST for an emulator).",
    },
    "az": {
        "bucket": "Create the container (az storage container create --name {bucket}) or correct its name.",
        "credentials": (
            "Set AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_TOKEN or "
            "AZURE_STORAGE_CONNECTION_STRING, or sign in for DefaultAzureCredential."
        ),
        "endpoint": "Check the storage account name and the network path to it.",
    },
    None: {
        "bucket": "Create the bucket or correct its name.",
        "credentials": (
            "Check the credentials and permissions for {protocol}:// (fsspec.config, FSSPEC_<PROTOCOL>_* "
            "variables or the provider's own configuration)."
        ),
        "endpoint": "Check the host in the URL and that its server answers.",
    },
}
_PROVIDERS = {"s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs", "az": "az", "abfs": "az", "abfss": "az"}


def storage_failure(url: str | os.PathLike, step: str, error: Exception, action: str = "read") -> OSError:
    """The error to raise, chained to `error`, when a storage call under `url` failed while `step` ("listing the
    checkpoints"): of the kind of failure (TimeoutError, ConnectionError, PermissionError, FileNotFoundError for a
    missing bucket, else OSError), naming the URL, the endpoint, what was tried and the likely fix. Secrets left
    out; `raise_storage_failure` chains `error` only when it shows none."""
    fs, path = open_filesystem(url)
    connect, read, attempts = storage_timeouts()
    tried = (
        f"No answer after {attempts} tries of at most {connect:g} s to connect and {read:g} s to answer "
        f"({CONNECT_TIMEOUT_VARIABLE}, {READ_TIMEOUT_VARIABLE} and {ATTEMPTS_VARIABLE} set these)."
    )
    return _failure(os.fspath(url), fs, path, step, error, tried, action)


def raise_storage_failure(url: str | os.PathLike, step: str, error: Exception, action: str = "read") -> NoReturn:
    """Raise `storage_failure(...)`, chained to `error` unless `error` would show a secret."""
    fs, _ = open_filesystem(url)
    raise storage_failure(url, step, error, action) from (error if is_secret_free(error, fs) else None)


def _failure(
    url: str, fs: AbstractFileSystem, path: str, step: str, error: Exception, timed_out: str, action: str
) -> OSError:
    target = innermost(fs)
    protocol = next((p for p in sorted(protocols_of(target)) if p in _PROVIDERS), sorted(protocols_of(target))[0])
    fixes = _FIXES[_PROVIDERS.get(protocol)]
    context = {"bucket": path.split("/", 1)[0], "protocol": protocol, "endpoint": _s3_endpoint(target)}
    names = {cls.__name__ for cls in type(error).__mro__}
    local = isinstance(target, LocalFileSystem)
    kind: type[OSError]
    if names & _TIMEOUT_ERRORS:  # before connections: botocore's ConnectTimeoutError is both
        kind, fix = TimeoutError, f"{timed_out} " + fixes["endpoint"]
    elif names & _CONNECTION_ERRORS:
        kind, fix = ConnectionError, fixes["endpoint"]
    elif names & _CREDENTIAL_ERRORS or (isinstance(error, PermissionError) and not local):
        kind, fix = PermissionError, fixes["credentials"]
    elif isinstance(error, PermissionError):
        kind, fix = PermissionError, "Choose a directory this user may write to, or change its permissions."
    elif getattr(error, "errno", None) == errno.EROFS:
        kind, fix = PermissionError, "The file system is mounted read-only: choose another directory."
    elif isinstance(error, FileNotFoundError) and protocol in OBJECT_STORE_PROTOCOLS:
        kind, fix = FileNotFoundError, "The bucket does not exist or is not visible. " + fixes["bucket"]
    else:
        kind, fix = OSError, "Check the URL and the storage's configuration."
    detail = f"{type(error).__name__}: {str(error).rstrip('.')}" if str(error) else type(error).__name__
    return kind(redact(f"Cannot {action} {url}: {step} failed with {detail}. {fix.format(**context)}", fs))


def _s3_endpoint(fs: AbstractFileSystem) -> str:
    """Where an S3 client sends its requests, for the error message (no credentials: see `redact`)."""
    configured = (getattr(fs, "client_kwargs", None) or {}).get("endpoint_url") or getattr(fs, "endpoint_url", None)
    if configured:
        return f"the file system's endpoint_url is {configured}"
    for variable in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        if os.environ.get(variable):
            return f"{variable} is {os.environ[variable]}"
    return "unset: AWS's endpoint for the region is used"
