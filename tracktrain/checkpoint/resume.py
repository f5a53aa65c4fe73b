"""Which checkpoint a fit resumes from: `Trainer(resume="auto")`, `fit(ckpt_path="last")`, or a named file.

The newest committed checkpoint under the run's checkpoint directories is loaded, as
`tracktrain.checkpoint.discovery.resume_candidates` finds them: the one with the highest step its manifest records,
never chosen by file name. An incomplete one (no manifest: the writer was killed) is never considered; one whose
manifest is not valid (a field missing, of the wrong type or out of range), or whose files do not match it, is
skipped with a warning naming the file and what is wrong, for the next newest. A checkpoint named explicitly is
loaded or refused with that message.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

from tracktrain.checkpoint.discovery import CommittedCheckpoint
from tracktrain.checkpoint.manifest import CheckpointCorrupted

__all__ = ["RESUME_CHOICES", "check_resume", "load_newest"]

RESUME_CHOICES = ("auto", "last")


def check_resume(resume: Any) -> str | None:
    """`Trainer(resume=...)`: None (start fresh unless `fit(ckpt_path=...)`), "auto", or a checkpoint path/URL."""
    if resume is None or resume is False:
        return None
    if resume is True:
        return "auto"
    if isinstance(resume, (str, os.PathLike)) and os.fspath(resume):
        return os.fspath(resume)
    raise ValueError(
        f'Trainer(resume=...) must be "auto" (the newest complete checkpoint of the run, or a fresh start), a '
        f"checkpoint path or URL, or None; got {resume!r}."
    )


def load_newest(candidates: list[CommittedCheckpoint], load: Callable[[str], None]) -> str | None:
    """`load(url)` the newest candidate that loads; those that turn out corrupted are skipped with a warning.
    Returns the URL loaded, or None when there was none to load."""
    for candidate in candidates:
        try:
            load(candidate.url)
        except CheckpointCorrupted as error:
            warnings.warn(f"Skipping checkpoint {candidate.url}: {error} Trying the one before it.", stacklevel=3)
            continue
        return candidate.url
    return None
