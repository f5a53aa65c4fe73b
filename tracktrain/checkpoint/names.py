"""How `Checkpoint` names its files: the file name pattern and its fields, the score as a name shows it, which names
a handler writes (any step, any score), and the newest checkpoint of a directory by the step in its name."""

from __future__ import annotations

import numbers
import os
import re
import string

from tracktrain.checkpoint.discovery import newest_named

__all__ = [
    "PATTERN_FIELDS",
    "check_filename_pattern",
    "default_filename_pattern",
    "filename_matcher",
    "format_score",
    "newest_by_step",
]

PATTERN_FIELDS = frozenset({"filename_prefix", "name", "score", "score_name", "global_step", "ext"})


def check_filename_pattern(pattern: str) -> None:
    """TypeError or ValueError unless `pattern` is a str that only uses the fields of `PATTERN_FIELDS`."""
    if not isinstance(pattern, str):
        raise TypeError(f"filename_pattern should be a str, got {pattern!r}.")
    fields = {field for _, field, _, _ in string.Formatter().parse(pattern) if field is not None}
    unknown = fields - PATTERN_FIELDS
    if unknown:
        raise ValueError(
            f"filename_pattern {pattern!r} uses unknown fields {sorted(unknown)}; it may use {sorted(PATTERN_FIELDS)}."
        )


def default_filename_pattern(
    with_prefix: bool = True, with_score: bool = True, with_score_name: bool = True, with_global_step: bool = True
) -> str:
    """The default file name pattern for the parts in use; with all of them:
    `{filename_prefix}_{name}_{global_step}_{score_name}={score}.{ext}`."""
    if not (with_global_step or with_score):
        raise ValueError("At least one of with_score and with_global_step should be True.")
    if with_score_name and not with_score:
        raise ValueError("If with_score_name is True, with_score should be also True.")
    pattern = "{name}"
    if with_global_step:
        pattern += "_{global_step}"
    if with_score:
        pattern += "_{score_name}={score}" if with_score_name else "_{score}"
    if with_prefix:
        pattern = "{filename_prefix}_" + pattern
    return pattern + ".{ext}"


def format_score(score: int | float) -> str:
    """The score as a file name shows it: an integer as it is, anything else with 4 decimals."""
    return f"{score}" if isinstance(score, numbers.Integral) else f"{score:.4f}"


def filename_matcher(
    pattern: str, filename_prefix: str, name: str, ext: str, score_name: str | None
) -> re.Pattern[str]:
    """What `pattern` formats with these fixed parts and any step and score: the names a handler writes."""
    fields = {
        "filename_prefix": re.escape(filename_prefix),
        "name": re.escape(name),
        "ext": re.escape(ext),
        "score_name": re.escape(str(score_name)),
        # "None": a custom pattern naming a part this handler does not have, as Ignite formats it
        "global_step": r"\d+|None",
        "score": r"-?(?:\d+(?:\.\d+)?(?:e[-+]?\d+)?|nan|inf)|None",
    }
    return re.compile(
        "".join(
            re.escape(literal) + (f"(?:{fields[field]})" if field is not None else "")
            for literal, field, _, _ in string.Formatter().parse(pattern)
        )
    )


def newest_by_step(dirname: str | os.PathLike, filename_prefix: str = "") -> str | None:
    """The newest checkpoint in a directory (a path or fsspec URL), for resuming in a new process; None when
    the directory is missing or holds none.

    "Newest" is the largest global step in the name, among `.pt` files named exactly as Checkpoint names them
    by default without a score: `{filename_prefix}_{name}_{global_step}.pt`, or `{name}_{global_step}.pt`
    when `filename_prefix` is empty. `name` must be one token without "_" or "=" (Checkpoint's name for
    several objects is "checkpoint"): otherwise `run_b_model_9.pt` could be prefix "run" with name
    "b_model", and `best_model_9512.pt` a best-score file whose score 9512 reads as a step. So files of
    other prefixes, score files and temporary files of unfinished writes never count, and neither do
    single objects saved under names with "_" (such as "lr_scheduler"): save several objects together, or
    pass the file to `load_objects` yourself. When several handlers save into the same directory, give
    each a prefix and pass it here.

    Complete: where the savers keep manifests (`manifest=True`), only committed checkpoints count, as for
    `Trainer(resume="auto")` (see `tracktrain.checkpoint.discovery`, the one search for the newest checkpoint).
    """
    lead = re.escape(f"{filename_prefix}_") if filename_prefix else ""
    return newest_named(dirname, re.compile(rf"{lead}[^_=/\\]+_(\d+)\.pt"))
