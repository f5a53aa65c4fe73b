"""The one way to find the newest complete checkpoint: by its manifest, never by its file name alone.

A checkpoint is complete when it is committed: its manifest exists, is valid, and lists files that are all there
with the sizes it records (`tracktrain.checkpoint.manifest`). Resume (`Trainer(resume="auto")`, `fit(ckpt_path=
"last")`), retention after a restart, `tracktrain runs` and `Checkpoint.get_last_checkpoint` all ask here, so they
agree on which checkpoint is the newest complete one. Checksums are checked when the checkpoint is read
(`manifest.read_checked`): a file altered after its commit is found then, and the next newest is taken.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tracktrain import storage
from tracktrain.checkpoint.manifest import (
    MANIFEST_SUFFIX,
    CheckpointCorrupted,
    member_sizes,
    parse_manifest,
    size_mismatch,
)
from tracktrain.storage.check import raise_storage_failure

__all__ = ["CommittedCheckpoint", "committed_checkpoints", "newest_named", "resume_candidates"]


@dataclass
class CommittedCheckpoint:
    """A checkpoint whose manifest exists and is valid, as listed (sizes checked against the listing; checksums on
    read). `manifest` is what `parse_manifest` returned, every field checked: `order` relies on their types."""

    directory: str
    data_filename: str
    manifest: dict[str, Any] = field(repr=False)

    @property
    def url(self) -> str:
        """The data file (a sharded checkpoint's directory), as `Checkpoint.load_objects` and `fit(ckpt_path=...)`
        take it."""
        return storage.join(self.directory, self.data_filename)

    @property
    def summary(self) -> dict[str, Any]:
        return self.manifest["summary"]

    @property
    def resumable(self) -> bool:
        """Whether a fit can resume from it: not a weights-only checkpoint (`ModelCheckpoint(save_weights_only=True)`,
        whose summary says so), which holds no optimizer, loop or callback state."""
        return not self.summary.get("weights_only")

    @property
    def order(self) -> tuple[int, int, float]:
        """Newer sorts higher: by global step, then engine iteration, then creation time."""
        summary = self.summary
        return summary.get("global_step", -1), summary.get("iteration", -1), self.manifest["created"]


def committed_checkpoints(directory: str | os.PathLike) -> tuple[list[CommittedCheckpoint], list[str]]:
    """The committed checkpoints in `directory`, newest first (by the step their manifests record, never by file
    name), and one line per checkpoint that is not: a manifest that cannot be read or is not valid (see
    `parse_manifest`), or whose files are missing or of the wrong size. A missing directory has none.
    """
    directory = os.fspath(directory)
    try:
        sizes = storage.file_sizes(directory)
    except FileNotFoundError:
        return [], []
    return _committed(directory, sizes)


def _committed(directory: str, sizes: dict[str, int]) -> tuple[list[CommittedCheckpoint], list[str]]:
    found: list[CommittedCheckpoint] = []
    problems: list[str] = []
    for name in sorted(sizes):
        if not _is_manifest(name):
            continue
        data_filename = name[: -len(MANIFEST_SUFFIX)]
        url = storage.join(directory, name)
        try:
            manifest = parse_manifest(storage.read_bytes(url), url)
        except (CheckpointCorrupted, FileNotFoundError) as error:
            problems.append(str(error))
            continue
        mismatch = size_mismatch(manifest, member_sizes(directory, manifest, sizes))
        if mismatch:
            problems.append(f"{storage.join(directory, data_filename)}: {mismatch}")
            continue
        found.append(CommittedCheckpoint(directory, data_filename, manifest))
    found.sort(key=lambda checkpoint: checkpoint.order, reverse=True)
    return found, problems


def _is_manifest(name: str) -> bool:
    return name.endswith(MANIFEST_SUFFIX) and not name.startswith(".")  # hidden: a temporary of a write cut short


def resume_candidates(directories: Iterable[str]) -> list[CommittedCheckpoint]:
    """The committed checkpoints of all `directories`, newest first; those that are not (incomplete, or with a
    manifest that is not valid) are reported in a warning each and left out. A store that does not answer, or
    refuses, raises the error of `check.storage_failure`."""
    found: list[CommittedCheckpoint] = []
    for directory in dict.fromkeys(directories):
        try:
            checkpoints, problems = committed_checkpoints(directory)
        except Exception as error:  # noqa: BLE001 - a store that is down, misconfigured or refuses: said clearly
            raise_storage_failure(directory, "listing its checkpoints", error, action="resume from")
        for problem in problems:
            warnings.warn(f"Skipping a checkpoint that is not committed: {problem}", stacklevel=3)
        found += checkpoints
    found.sort(key=lambda checkpoint: checkpoint.order, reverse=True)
    return found


def newest_named(directory: str | os.PathLike, named: re.Pattern[str]) -> str | None:
    """The newest complete checkpoint in `directory` among the files whose whole name `named` matches, its group 1
    being the global step that orders them; None when the directory is missing or holds none.

    For savers that keep no manifest (`manifest=False`, the default of `DiskSaver` and `FsspecSaver`) the file is
    the checkpoint: written atomically, it is complete once it has its name. In a directory that keeps manifests,
    only committed checkpoints count, as for every other search here: a data file whose save was killed before its
    manifest, or whose manifest or size is wrong, is not complete.
    """
    try:
        sizes = storage.file_sizes(directory)
    except FileNotFoundError:
        return None
    steps = {}
    for name in sorted(sizes):
        match = named.fullmatch(name)
        if match is not None:
            steps[name] = int(match.group(1))
    if any(_is_manifest(name) for name in sizes):
        committed = {checkpoint.data_filename for checkpoint in _committed(os.fspath(directory), sizes)[0]}
        steps = {name: step for name, step in steps.items() if name in committed}
    if not steps:
        return None
    return storage.join(directory, max(steps, key=lambda name: steps[name]))
