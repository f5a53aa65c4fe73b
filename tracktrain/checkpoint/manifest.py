"""Checkpoint manifests: a checkpoint counts as committed only when its manifest exists and matches its files.

A checkpoint is a set of files plus a small JSON manifest written after all of them, under the checkpoint's name
with `.manifest.json` appended: one `torch.save` file of that name, or a directory of that name holding the files
of a sharded checkpoint (`torch.distributed.checkpoint`'s, each rank's shards and `.metadata`), listed as
`name/file`. The manifest lists every file with its size and
SHA-256, and a summary of the run at that point (global step, epoch, iteration, the trackers' run ids). So:

- a crash before the manifest is written leaves a checkpoint without one, which is never loaded;
- a file truncated or altered afterwards no longer matches its manifest, and is refused with a message that says
  which file and how it differs;
- deleting removes the manifest first, so a half-deleted checkpoint is never taken for a whole one;
- a manifest is trusted only once every field has been checked (`parse_manifest`, the one place that reads one):
  one edited by hand, written by another version, or damaged in a way that still parses as JSON counts as not
  committed, and is refused with a message naming the manifest, the field, its value and what it should be.

Which checkpoints of a directory are committed, and which is the newest: `tracktrain.checkpoint.discovery`.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import os
import re
import threading
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any, NamedTuple

from tracktrain import storage  # its public names, so a replaced one (a test's full disk) reaches the manifest too
from tracktrain.checks.refusal import Refusal
from tracktrain.storage.check import PROBE_PREFIX
from tracktrain.storage.url import split

__all__ = [
    "MANIFEST_SUFFIX",
    "CheckedRead",
    "CheckpointCorrupted",
    "FileDigest",
    "UnsafeCheckpoint",
    "is_plain_name",
    "manifest_name",
    "member_sizes",
    "parse_manifest",
    "read_checked",
    "remove_checkpoint",
    "remove_uncommitted",
    "size_mismatch",
    "write_manifest",
]

MANIFEST_SUFFIX = ".manifest.json"
FORMAT = "tracktrain-checkpoint/1"
SUMMARY_COUNTERS = ("global_step", "iteration", "epoch", "samples_seen")


class CheckpointCorrupted(Refusal, RuntimeError):
    """A checkpoint's files do not match its manifest (truncated, altered, or missing), or cannot be read."""


class UnsafeCheckpoint(CheckpointCorrupted):
    """A checkpoint file holds something that would run code if it were read as its format allows (a pickled object
    other than plain data and tensors), or a sharded checkpoint has no manifest to check it against: refused before
    any of it is used. A `CheckpointCorrupted`, so that `resume="auto"` passes over it to the next newest."""


def manifest_name(data_filename: str) -> str:
    return data_filename + MANIFEST_SUFFIX


class FileDigest(NamedTuple):
    """A file's size and SHA-256, computed by whoever wrote it (the ranks of a sharded checkpoint each hash theirs)."""

    bytes: int
    sha256: str


def sha256_of(data: bytes | bytearray | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()  # hashlib releases the GIL on large buffers: fine in a saver thread


def write_manifest(
    directory: str,
    files: Mapping[str, bytes | bytearray | memoryview | FileDigest],
    summary: Mapping[str, Any],
    metadata: Mapping[str, Any] | None = None,
    checkpoint_name: str | None = None,
) -> None:
    """Write the manifest of a checkpoint whose `files` (name -> the bytes just committed, or their `FileDigest`)
    are in `directory`. Call it only after every file is committed: its existence is what makes the checkpoint
    loadable. `checkpoint_name` (default: the first file's name) names the manifest: a sharded checkpoint's
    directory, whose files are listed as `checkpoint_name/file`."""
    if not files:
        raise ValueError("A checkpoint manifest needs at least one file.")
    names = list(files)
    checkpoint_name = checkpoint_name or names[0]
    digests = {
        name: data if isinstance(data, FileDigest) else FileDigest(len(data), sha256_of(data))
        for name, data in files.items()
    }
    manifest = {
        "format": FORMAT,
        "created": time.time(),
        "files": {name: {"bytes": digest.bytes, "sha256": digest.sha256} for name, digest in digests.items()},
        "summary": dict(summary),
        # numbers of other types (a numpy score) as the exact Python number: retention reads `priority` back
        "metadata": {
            key: _plain_scalar(value)
            for key, value in (metadata or {}).items()
            if _is_json_scalar(_plain_scalar(value))
        },
    }
    url = storage.join(directory, manifest_name(checkpoint_name))
    # what the reader would refuse is refused here, at the save, rather than found at the resume
    problem = _manifest_problem(manifest, checkpoint_name)
    if problem is not None:
        field_name, value, expected = problem
        raise ValueError(
            f"Cannot write the checkpoint manifest {url}: {field_name} is {_short(value)}, it should be "
            f"{expected}. Check what the save handler's `summarize` returns."
        )
    text = json.dumps(manifest, indent=1, sort_keys=True).encode()
    storage.write_bytes_atomic(url, text)


class CheckedRead(NamedTuple):
    """A checkpoint file's bytes, the `check()` that raises unless they match its manifest, and the manifest (None
    for a file without one)."""

    data: bytes
    check: Callable[[], None]
    manifest: dict[str, Any] | None


def read_checked(url: str | os.PathLike) -> CheckedRead:
    """The bytes of the checkpoint file at `url`, and a `check()` that raises CheckpointCorrupted, saying what
    does not match, unless they match the file's manifest. The SHA-256 is computed in a thread meanwhile, so the
    caller can deserialize while it runs (as plain data only: `plain_data.load_plain`); it must call `check()`
    before it uses anything read. A file without a manifest (not written by a manifest-keeping saver) has nothing
    to check."""
    url = os.fspath(url)
    directory, data_filename = split(url)
    manifest_url = storage.join(directory, manifest_name(data_filename))
    try:
        manifest = parse_manifest(storage.read_bytes(manifest_url), manifest_url)  # it lists data_filename
    except FileNotFoundError:
        return CheckedRead(storage.read_bytes(url), lambda: None, None)
    # every file of the checkpoint, not only the one read here, is there with the size its manifest records
    mismatch = size_mismatch(manifest, storage.file_sizes(directory))
    if mismatch:
        raise CheckpointCorrupted(
            f"Checkpoint {url} is incomplete: {mismatch} (its manifest {manifest_url} lists every file of the "
            "checkpoint). Nothing was loaded; restore the file from a copy, or load another checkpoint "
            '(Trainer(resume="auto") takes the newest complete one).'
        )
    data = storage.read_bytes(url)
    expected = manifest["files"][data_filename]
    if len(data) != expected["bytes"]:  # changed since the listing
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

    return CheckedRead(data, check, manifest)


def member_sizes(directory: str, manifest: Mapping[str, Any], sizes: Mapping[str, int]) -> dict[str, int]:
    """`sizes` (a listing of `directory`) with the files of the checkpoint directories `manifest` lists files in
    (a sharded checkpoint's), as `name/file`: what `size_mismatch` compares the manifest with."""
    result = dict(sizes)
    for subdirectory in sorted({name.split("/", 1)[0] for name in manifest["files"] if "/" in name}):
        try:
            inside = storage.file_sizes(storage.join(directory, subdirectory))
        except FileNotFoundError:
            continue
        result.update({f"{subdirectory}/{name}": size for name, size in inside.items()})
    return result


def remove_checkpoint(directory: str, data_filename: str) -> None:
    """Delete a checkpoint: its manifest first (from then on it is not loadable), then its files (a sharded
    checkpoint's directory with everything in it)."""
    manifest_url = storage.join(directory, manifest_name(data_filename))
    files = [data_filename]
    try:
        files = list(parse_manifest(storage.read_bytes(manifest_url), manifest_url)["files"])
    except (FileNotFoundError, CheckpointCorrupted):
        pass
    storage.remove(manifest_url, missing_ok=True)
    if data_filename in storage.subdirectories(directory):  # a sharded checkpoint: its directory, all of it
        storage.remove_tree(storage.join(directory, data_filename))
        return
    for name in files:
        if is_plain_name(name):  # a manifest only ever names files beside it, or in the checkpoint's directory
            storage.remove(storage.join(directory, name), missing_ok=True)


def remove_uncommitted(
    directory: str | os.PathLike, owned: Callable[[str], bool] = lambda name: False, keep: Collection[str] = ()
) -> list[str]:
    """Delete what saves killed part-way left in `directory`; returns the names deleted. That is:

    - the hidden temporary files of writes cut short (named by `tracktrain.storage.files` `.<name>.<12 hex>.tmp`),
      and the write-probe files of `tracktrain.storage.check` that a kill during the probe left;
    - data files without a manifest whose names the caller `owned` (its handlers' file names): a kill after the
      data file was committed but before its manifest, or in the middle of a deletion (manifest gone first).
      Such a file is never loaded, but retention no longer knows it, so it would stay forever.

    Call it only while no save into `directory` is under way (at the start of a run, on the writing rank). Other
    files, and those in `keep` (the checkpoint a run was told to resume from), are never touched."""
    directory = os.fspath(directory)
    try:
        names = storage.file_sizes(directory)
    except FileNotFoundError:
        return []
    stale = [
        name
        for name in names
        if name not in keep
        and (
            _TEMPORARY.fullmatch(name)
            or _PROBE.fullmatch(name)
            or (not name.endswith(MANIFEST_SUFFIX) and owned(name) and manifest_name(name) not in names)
        )
    ]
    for name in stale:
        storage.remove(storage.join(directory, name), missing_ok=True)
    # a sharded save killed before its manifest: the checkpoint's directory, whatever the ranks had written in it
    for name in storage.subdirectories(directory):
        if name not in keep and owned(name) and manifest_name(name) not in names:
            storage.remove_tree(storage.join(directory, name))
            stale.append(name)
    return stale


_TEMPORARY = re.compile(r"\..+\.[0-9a-f]{12}\.tmp")
_PROBE = re.compile(re.escape(PROBE_PREFIX) + r"[0-9a-f]{12}")


def parse_manifest(text: bytes, url: str) -> dict[str, Any]:
    """The manifest at `url` (`text`: its bytes), every field checked; CheckpointCorrupted naming the manifest, the
    field, its value and what it should be, when one is missing, of the wrong type or out of range."""
    try:
        manifest = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise CheckpointCorrupted(
            f"Checkpoint manifest {url} is not valid JSON ({error}): it was cut short or damaged. {_FIX}"
        ) from None
    name = split(url)[1]
    problem = _manifest_problem(manifest, name[: -len(MANIFEST_SUFFIX)] if name.endswith(MANIFEST_SUFFIX) else None)
    if problem is not None:
        field_name, value, expected = problem
        raise CheckpointCorrupted(
            f"Checkpoint manifest {url} is not a valid {FORMAT} manifest: {field_name} is {_short(value)}, it should "
            f"be {expected}. It was edited, damaged, or written by another version of tracktrain. {_FIX}"
        )
    return manifest


_FIX = (
    "So the checkpoint is not trusted, and nothing is loaded from it: restore the manifest from a copy, or load "
    'another checkpoint (Trainer(resume="auto") takes the newest valid one).'
)
_MISSING = object()
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _manifest_problem(manifest: Any, data_filename: str | None) -> tuple[str, Any, str] | None:
    """(field, its value, what it should be) for the first field of `manifest` that is not as `write_manifest`
    writes it; None when all are. `data_filename`: the file the manifest is named for, which it must list."""
    if not isinstance(manifest, dict):
        return "the manifest", manifest, "a JSON object"
    for key in ("format", "created", "files", "summary", "metadata"):
        if key not in manifest:
            return f"field {key!r}", _MISSING, "present"
    if manifest["format"] != FORMAT:
        return "field 'format'", manifest["format"], repr(FORMAT)
    created = manifest["created"]
    if not (_is_number(created) and math.isfinite(created)):
        return "field 'created'", created, "a finite number (seconds since the epoch)"
    files = manifest["files"]
    if not isinstance(files, dict) or not files:
        return "field 'files'", files, "a non-empty object: file name -> {bytes, sha256}"
    for name, entry in files.items():
        if not _is_member_name(name, data_filename):
            return (
                "a name in field 'files'",
                name,
                "a plain file name beside the manifest, or in the checkpoint's directory (no other path separator, "
                "not '..')",
            )
        if not isinstance(entry, dict):
            return f"field 'files.{name}'", entry, "an object {bytes, sha256}"
        size = entry.get("bytes", _MISSING)
        if not (_is_int(size) and size >= 0):
            return f"field 'files.{name}.bytes'", size, "an integer >= 0"
        digest = entry.get("sha256", _MISSING)
        if not (isinstance(digest, str) and _SHA256.fullmatch(digest)):
            return f"field 'files.{name}.sha256'", digest, "64 lowercase hexadecimal digits"
    if data_filename is not None and not any(_is_member_name(name, data_filename, inside=True) for name in files):
        return "field 'files'", sorted(files), f"a listing that includes {data_filename!r}, the file it is named for"
    summary = manifest["summary"]
    if not isinstance(summary, dict):
        return "field 'summary'", summary, "an object"
    for key in SUMMARY_COUNTERS:
        value = summary.get(key, 0)
        if not (_is_int(value) and value >= 0):
            return f"field 'summary.{key}'", value, "an integer >= 0"
    run_ids = summary.get("run_ids", {})
    if not (isinstance(run_ids, dict) and all(isinstance(value, str) for value in run_ids.values())):
        return "field 'summary.run_ids'", run_ids, "an object of tracker name -> run id (strings)"
    metadata = manifest["metadata"]
    if not isinstance(metadata, dict):
        return "field 'metadata'", metadata, "an object"
    for key, value in metadata.items():
        if not _is_json_scalar(value):
            return f"field 'metadata.{key}'", value, "a JSON scalar (string, number, boolean or null)"
    return None


def size_mismatch(manifest: Mapping[str, Any], sizes: Mapping[str, int]) -> str | None:
    """What is wrong with the files a valid `manifest` lists, given the sizes of a listing (`storage.file_sizes`); None
    when every one is there with the size the manifest records."""
    for name, expected in manifest["files"].items():
        if name not in sizes:
            return f"{name} is missing"
        if sizes[name] != expected["bytes"]:
            change = "truncated" if sizes[name] < expected["bytes"] else "appended to"
            return f"{name} is {sizes[name]} bytes, its manifest says {expected['bytes']} ({change} after its commit?)"
    return None


def _is_json_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _plain_scalar(value: Any) -> Any:
    """A number of another type (a numpy scalar) as the exact Python int or float; anything else as it is."""
    if isinstance(value, bool) or _is_number(value) or not isinstance(value, numbers.Real):
        return value
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def is_plain_name(filename: Any) -> bool:
    """Whether `filename` names a file directly inside a directory: not absolute, no path separator, not "..".
    ("a..b" is a plain name: without a separator ".." can only be the whole name.) The savers write and delete
    only such names, and a manifest lists only such names."""
    separators = {"/", os.sep} | ({os.altsep} if os.altsep else set())
    return (
        isinstance(filename, str)
        and filename not in ("", ".", "..")
        and not os.path.isabs(filename)
        and not any(sep in filename for sep in separators)
    )


def _is_member_name(name: str, checkpoint: str | None, inside: bool = False) -> bool:
    """Whether `name` may be listed by the manifest of `checkpoint`: a plain name (the checkpoint itself with
    `inside`), or `checkpoint/plain name` (a file of a sharded checkpoint's directory)."""
    if is_plain_name(name) and (not inside or name == checkpoint):
        return True
    directory, _, member = name.partition("/")
    return checkpoint is not None and directory == checkpoint and is_plain_name(directory) and is_plain_name(member)


def _short(value: Any) -> str:
    if value is _MISSING:
        return "missing"
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
