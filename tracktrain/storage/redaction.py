"""Keeping secrets out of error messages and files: URL passwords, secret query parameters, and the values of
secret-named environment variables, `fsspec.config` entries and a file system's storage options become `***`
(`redact`); a URL that is written down to be used again (a tracker's spill file) loses its credentials altogether
(`split_credentials`)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit, urlunsplit

import fsspec.config
from fsspec import AbstractFileSystem

__all__ = ["is_secret_free", "redact", "split_credentials"]

_SECRET_NAME = re.compile(r"secret|token|passw|credential|access_key|account_key|connection_string|sas|^key$", re.I)
_URL_PASSWORD = re.compile(r"([a-zA-Z][\w+.-]*://[^/\s:@]*:)[^/\s@]+@")  # scheme://user:PASSWORD@host
_SECRET_QUERY = re.compile(r"([?&][^=&\s]*(?:sig|token|key|secret|passw|credential)[^=&\s]*=)[^&\s\"']+", re.I)


def redact(text: str, fs: AbstractFileSystem | None = None) -> str:
    """`text` with URL passwords, secret query parameters and every known secret value replaced by ***."""
    text = _URL_PASSWORD.sub(r"\1***@", text)
    text = _SECRET_QUERY.sub(r"\1***", text)
    for value in sorted(_secret_values(fs), key=len, reverse=True):  # longest first: one may contain another
        text = text.replace(value, "***")
    return text


def split_credentials(url: str) -> tuple[str, str | None, str | None]:
    """`url` without the user name and password written in it, and those two (unquoted; None where absent): the
    URL can then be kept in plain text and the credentials handed on apart (e.g. in environment variables)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None, None
    host = parts.hostname or ""
    bare = urlunsplit(parts._replace(netloc=f"{host}:{parts.port}" if parts.port else host))
    return (
        bare,
        None if parts.username is None else unquote(parts.username),
        None if parts.password is None else unquote(parts.password),
    )


def is_secret_free(error: BaseException, fs: AbstractFileSystem) -> bool:
    """Whether `error` and its causes say nothing `redact` would hide (so it may be chained to ours)."""
    seen = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen:
        if redact(str(link), fs) != str(link):
            return False
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return True


def _secret_values(fs: AbstractFileSystem | None) -> set[str]:
    values = {value for name, value in os.environ.items() if _SECRET_NAME.search(name)}
    _collect_secrets(fsspec.config.conf, values)
    if fs is not None:
        _collect_secrets(getattr(fs, "storage_options", {}), values)
    return {value for value in values if len(value) >= 6}  # shorter ones would match ordinary words, not secrets


def _collect_secrets(options: Mapping, values: set[str]) -> None:
    for name, value in options.items():
        if isinstance(value, Mapping):
            _collect_secrets(value, values)
        elif isinstance(value, str) and _SECRET_NAME.search(str(name)):
            values.add(value)
