"""Checkpoint manifests: a checkpoint counts as committed only when its manifest exists and matches its files.

A checkpoint is a set of files (today one `torch.save` file) plus a small JSON manifest written after all of
them, under the data file's name with `.manifest.json` appended. The manifest lists every file with its size and
SHA-256, and a summary of the run at that point (global step, epoch, iteration, the trackers' run ids). So:

- a crash before the manifest is written leaves a checkpoint without one, which is never loaded;
- a file truncated or altered afterwards no longer matches its manifest, and is refused with a message that says
  which file and how it differs;
- deleting removes the manifest first, so a half-deleted checkpoint is never taken for a whole one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from tracktrain import storage

__all__ = [
    "MANIFEST_SUFFIX",
    "CheckpointCorrupted",
    "CommittedCheckpoint",
    "committed_checkpoints",
    "manifest_name",
    "read_checked",
    "remove_checkpoint",
    "remove_uncommitted",
    "write_manifest",
]

MANIFEST_SUFFIX = ".manifest.json"
FORMAT = "tracktrain-checkpoint/1"


class CheckpointCorrupted(RuntimeError):
    """A checkpoint's files do not match its manifest (truncated, altered, or missing)."""


def manifest_name(data_filename: str) -> str:
    return data_filename + MANIFEST_SUFFIX


def sha256_of(data: bytes | bytearray | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()  # hashlib releases the GIL on large buffers: fine in a saver thread


def write_manifest(directory: str, files: Mapping[str, bytes | bytearray | memoryview], summary: Mapping[str, Any],
                   metadata: Mapping[str, Any] | None = None) -> None:
    """Write the manifest of a checkpoint whose `files` (name -> the bytes just committed) are in `directory`.
    Call it only after every file is committed: its existence is what makes the checkpoint loadable."""
    if not files:
        raise ValueError("A checkpoint manifest needs at least one file.")
    names = list(files)
    manifest = {
        "format": FORMAT,
        "created": time.time(),
        "files": {name: {"bytes": len(data), "sha256": sha256_of(data)} for name, data in files.items()},
        "summary": dict(summary),
        "metadata": {key: value for key, value in (metadata or {}).items() if _is_json_scalar(value)},
    }
    text = json.dumps(manifest, indent=1, sort_keys=True).encode()
    storage.write_bytes_atomic(storage.join(directory, manifest_name(names[0])), text)


@dataclass
class CommittedCheckpoint:
    """A checkpoint whose manifest exists, as listed (sizes checked against the listing; checksums on read)."""

    directory: str
    data_filename: str
    manifest: dict[str, Any] = field(repr=False)

    @property
    def url(self) -> str:
        """The data file, as `Checkpoint.load_objects` and `fit(ckpt_path=...)` take it."""
        return storage.join(self.directory, self.data_filename)

    @property
    def summary(self) -> dict[str, Any]:
        return self.manifest.get("summary", {})

    @property
    def order(self) -> tuple[int, int, float]:
        """Newer sorts higher: by global step, then engine iteration, then creation time."""
        summary = self.summary
        return (int(summary.get("global_step", -1)), int(summary.get("iteration", -1)),
                float(self.manifest.get("created", 0.0)))


def committed_checkpoints(directory: str | os.PathLike) -> tuple[list[CommittedCheckpoint], list[str]]:
    """The committed checkpoints in `directory`, newest first, and one line per checkpoint that is not (a
    manifest that cannot be read, or whose files are missing or of the wrong size). A missing directory has none.
    """
    directory = os.fspath(directory)
    try:
        sizes = _file_sizes(directory)
    except FileNotFoundError:
        return [], []
    found: list[CommittedCheckpoint] = []
    problems: list[str] = []
    for name in sorted(sizes):
        if not name.endswith(MANIFEST_SUFFIX) or name.startswith("."):
            continue
        data_filename = name[: -len(MANIFEST_SUFFIX)]
        try:
            manifest = _parse(storage.read_bytes(storage.join(directory, name)), name)
        except (CheckpointCorrupted, FileNotFoundError) as error:
            problems.append(str(error))
            continue
        mismatch = _size_mismatch(manifest, sizes)
        if mismatch:
            problems.append(f"{storage.join(directory, data_filename)}: {mismatch}")
            continue
        found.append(CommittedCheckpoint(directory, data_filename, manifest))
    found.sort(key=lambda checkpoint: checkpoint.order, reverse=True)
    return found, problems


def read_checked(url: str | os.PathLike) -> tuple[bytes, Callable[[], None]]:
    """The bytes of the checkpoint file at `url`, and a `check()` that raises CheckpointCorrupted, saying what
    does not match, unless they match the file's manifest. The SHA-256 is computed in a thread meanwhile, so the
    caller can deserialize while it runs; it must call `check()` before it uses anything read. A file without a
    manifest (not written by a manifest-keeping saver) has nothing to check."""
    url = os.fspath(url)
    directory, data_filename = _split(url)
    manifest_url = storage.join(directory, manifest_name(data_filename))
    try:
        manifest = _parse(storage.read_bytes(manifest_url), manifest_name(data_filename))
    except FileNotFoundError:
        return storage.read_bytes(url), lambda: None
    data = storage.read_bytes(url)
    expected = manifest["files"].get(data_filename)
    if expected is None:
        raise CheckpointCorrupted(f"Checkpoint {url}: its manifest {manifest_url} does not list it.")
    if len(data) != expected["bytes"]:
        raise CheckpointCorrupted(
            f"Checkpoint {url} is {len(data)} bytes but its manifest says {expected['bytes']}: the file was "
            f"{'truncated' if len(data) < expected['bytes'] else 'appended to'} after it was committed."
        )
    digest: list[str] = []
    hashing = threading.Thread(target=lambda: digest.append(sha256_of(data)), name="tracktrain-checksum")
    hashing.start()

    def check() -> None:
        hashing.join()
        if digest != [expected["sha256"]]:
            raise CheckpointCorrupted(
                f"Checkpoint {url} does not match the SHA-256 in its manifest {manifest_url}: the file was altered "
                "or damaged after it was committed."
            )

    return data, check


def remove_checkpoint(directory: str, data_filename: str) -> None:
    """Delete a checkpoint: its manifest first (from then on it is not loadable), then its files."""
    manifest_url = storage.join(directory, manifest_name(data_filename))
    files = [data_filename]
    try:
        files = list(_parse(storage.read_bytes(manifest_url), manifest_name(data_filename))["files"])
    except (FileNotFoundError, CheckpointCorrupted):
        pass
    storage.remove(manifest_url, missing_ok=True)
    for name in files:
        if name == os.path.basename(name):  # a manifest only ever names files beside it
            storage.remove(storage.join(directory, name), missing_ok=True)


def remove_uncommitted(directory: str | os.PathLike, owned: Callable[[str], bool] = lambda name: False,
                       keep: Collection[str] = ()) -> list[str]:
    """Delete what saves killed part-way left in `directory`; returns the names deleted. That is:

    - the hidden temporary files of writes cut short (named by `tracktrain.storage` `.<name>.<12 hex>.tmp`);
    - data files without a manifest whose names the caller `owned` (its handlers' file names): a kill after the
      data file was committed but before its manifest, or in the middle of a deletion (manifest gone first).
      Such a file is never loaded, but retention no longer knows it, so it would stay forever.

    Call it only while no save into `directory` is under way (at the start of a run, on the writing rank). Other
    files, and those in `keep` (the checkpoint a run was told to resume from), are never touched."""
    directory = os.fspath(directory)
    try:
        names = _file_sizes(directory)
    except FileNotFoundError:
        return []
    stale = [
        name for name in names
        if name not in keep and (
            _TEMPORARY.fullmatch(name)
            or (not name.endswith(MANIFEST_SUFFIX) and owned(name) and manifest_name(name) not in names)
        )
    ]
    for name in stale:
        storage.remove(storage.join(directory, name), missing_ok=True)
    return stale


_TEMPORARY = re.compile(r"\..+\.[0-9a-f]{12}\.tmp")


def _file_sizes(directory: str) -> dict[str, int]:
    """Name -> size of the files directly in `directory`, from one listing (one request on an object store)."""
    fs, path = storage.open_filesystem(directory)
    fs.invalidate_cache(path)  # another process (the run before a crash) wrote here
    entries = fs.ls(path, detail=True)
    return {entry["name"].rstrip("/").rsplit("/", 1)[-1]: int(entry.get("size") or 0)
            for entry in entries if entry["type"] == "file"}


def _parse(text: bytes, name: str) -> dict[str, Any]:
    try:
        manifest = json.loads(text)
    except ValueError as error:
        raise CheckpointCorrupted(f"Checkpoint manifest {name} is not valid JSON ({error}).") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or not isinstance(manifest.get("files"), dict):
        raise CheckpointCorrupted(f"Checkpoint manifest {name} is not a {FORMAT} manifest.")
    return manifest


def _size_mismatch(manifest: Mapping[str, Any], sizes: Mapping[str, int]) -> str | None:
    for name, expected in manifest["files"].items():
        if name not in sizes:
            return f"{name} is missing"
        if sizes[name] != expected["bytes"]:
            return f"{name} is {sizes[name]} bytes, its manifest says {expected['bytes']} (truncated?)"
    return None


def _split(url: str) -> tuple[str, str]:
    separator = "/" if "://" in url else os.sep
    directory, _, name = url.rpartition(separator)
    if "://" not in url and os.altsep and os.altsep in name:
        directory, _, name = url.rpartition(os.altsep)
    return directory or ".", name


def _is_json_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))
