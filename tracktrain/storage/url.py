"""Locations as text: a local path or an fsspec URL (`file://...`, `memory://...`, `s3://bucket/key`, chained ones
such as `simplecache::s3://bucket/key`). The one place that reads how a location is written; which file system
serves it is `tracktrain.storage.filesystems`' job."""

from __future__ import annotations

import os
import re
from typing import Union

import fsspec.core

__all__ = ["PathOrURL", "basename", "is_remote", "is_url", "join", "split", "url_protocols"]

PathOrURL = Union[str, "os.PathLike[str]"]

# Protocols fsspec serves from the local disk.
_LOCAL_PROTOCOLS = frozenset({"file", "local"})


def is_url(url: PathOrURL) -> bool:
    """Whether `url` is written as a URL (`protocol://...`, `file://` included) rather than as a plain path."""
    return "://" in os.fspath(url)


def url_protocols(url: PathOrURL) -> list[str]:
    """The protocols of a URL, outermost first: `simplecache::s3://b/k` -> ['simplecache', 's3']; a plain path has
    none."""
    url = os.fspath(url)
    chained = "::" in url
    protocols = []
    for part in url.split("::"):
        protocol = fsspec.core.split_protocol(part)[0]
        if protocol is None and chained and re.fullmatch(r"[a-z][a-z0-9_]*", part):
            protocol = part  # fsspec reads a bare word in a chain as a protocol (`simplecache::...`)
        if protocol:
            protocols.append(protocol)
    return protocols


def is_remote(url: PathOrURL) -> bool:
    """Whether `url` names storage other than the local disk, read from its text alone (no file system is opened,
    no driver imported): it has a protocol other than `file://`/`local://`, chained ones included. A plain path and
    a `file://` URL are not remote. (`tracktrain.storage.is_local` asks fsspec instead, and fails on a protocol it
    does not know.)"""
    return any(protocol not in _LOCAL_PROTOCOLS for protocol in url_protocols(url))


def join(url: PathOrURL, name: str) -> str:
    """`url` with `name` appended as one more path component, keeping the URL's protocol."""
    url = os.fspath(url)
    if not is_url(url):
        return os.path.join(url, name)
    return url + name if url.endswith("/") else f"{url}/{name}"


def split(url: PathOrURL) -> tuple[str, str]:
    """(the directory, the file name) of `url`: split at its last "/" when it is a URL, at the platform's separators
    when it is a path. A bare name is in the directory "."."""
    url = os.fspath(url)
    separator = "/" if is_url(url) else os.sep
    directory, _, name = url.rpartition(separator)
    if not is_url(url) and os.altsep and os.altsep in name:
        directory, _, name = url.rpartition(os.altsep)
    return directory or ".", name


def basename(url: PathOrURL) -> str:
    """The file name at the end of `url` (path or URL)."""
    return split(url)[1]
