"""Lightning's checkpoint file names: `ModelCheckpoint(filename="{epoch}-{val_loss:.2f}")` names each top-k file by the
values at its save, as Lightning does (`epoch=3-val_loss=0.52.pt`; with `auto_insert_metric_name=False`, `3-0.52.pt`).
The fields are `epoch` (counted from 0), `step` (the global step) and any logged metric (`trainer.callback_metrics`),
each with an optional format spec. A name the kept files already have gets `-v1`, `-v2`, ... (Lightning's versions),
so that a save never overwrites, and retention never deletes, the file it has just written.

`TemplateCheckpoint` is the `Checkpoint` handler that names its files so; everything else (retention, manifests,
resume) is the handler's own.
"""

from __future__ import annotations

import os
import re
import string
from collections.abc import Callable, Mapping
from typing import Any

from tracktrain import storage
from tracktrain.checkpoint.handler import Checkpoint
from tracktrain.engine.engine import Engine

__all__ = ["FilenameTemplate", "TemplateCheckpoint", "check_save_top_k", "template_of", "top_k_handler"]

_VALUE = r"[\w.%+-]*?"  # what a formatted number looks like (digits, sign, point, exponent, nan, inf, %)


class FilenameTemplate:
    """A `ModelCheckpoint(filename=...)` template, checked when the callback is built."""

    def __init__(self, template: Any, auto_insert_metric_name: Any = True) -> None:
        if not isinstance(template, str) or not template.strip():
            raise TypeError(
                f'ModelCheckpoint(filename=...) must be a non-empty str such as "{{epoch}}-{{val_loss:.2f}}", got '
                f"{template!r}."
            )
        if not isinstance(auto_insert_metric_name, bool):
            raise TypeError(
                f"ModelCheckpoint(auto_insert_metric_name=...) must be a bool, got {auto_insert_metric_name!r}."
            )
        try:
            self.parts = [(literal, field, spec) for literal, field, spec, _ in string.Formatter().parse(template)]
        except ValueError as error:  # unbalanced braces
            raise ValueError(f"ModelCheckpoint(filename={template!r}) is not a valid template: {error}.") from None
        if any(field == "" or (field is not None and field.isdigit()) for _, field, _ in self.parts):
            raise ValueError(
                f"ModelCheckpoint(filename={template!r}) has a field without a name: name each one, as in "
                '"{epoch}-{step}-{val_loss:.2f}".'
            )
        if any(sep in literal for literal, _, _ in self.parts for sep in "/\\"):
            raise ValueError(
                f"ModelCheckpoint(filename={template!r}) names a file in a subdirectory: give the directory as dirpath."
            )
        self.template = template
        self.auto_insert_metric_name = auto_insert_metric_name

    def render(self, values: Mapping[str, Any]) -> str:
        """The name (without extension) for `values`; a field that is not among them is an error naming those that
        are."""
        missing = [field for _, field, _ in self.parts if field is not None and field not in values]
        if missing:
            raise ValueError(
                f"ModelCheckpoint(filename={self.template!r}) names {missing}, which nothing logged; the values known at "
                f"this save are {sorted(values)}. Log them with self.log(...) before the save, or change the filename."
            )
        name = ""
        for literal, field, spec in self.parts:
            name += literal
            if field is not None:
                value = values[field]
                value = value.item() if hasattr(value, "item") and getattr(value, "ndim", 1) == 0 else value
                name += (f"{field}=" if self.auto_insert_metric_name else "") + format(value, spec or "")
        if "/" in name or "\\" in name:
            raise ValueError(
                f"ModelCheckpoint(filename={self.template!r}) gives {name!r}, a name with a path separator (a metric "
                "named with '/'): pass auto_insert_metric_name=False and write the names you want in the template."
            )
        return name

    def matcher(self, ext: str) -> re.Pattern[str]:
        """Every name this template gives, any values and version, with extension `ext`."""
        pattern = ""
        for literal, field, _ in self.parts:
            pattern += re.escape(literal)
            if field is not None:
                pattern += (re.escape(f"{field}=") if self.auto_insert_metric_name else "") + _VALUE
        return re.compile(rf"{pattern}(?:-v\d+)?\.{re.escape(ext)}")


def template_of(filename: Any, filename_prefix: Any, auto_insert_metric_name: Any) -> FilenameTemplate | None:
    """`ModelCheckpoint`'s `filename` template (None: without one), checked with the `filename_prefix` it replaces."""
    if not isinstance(filename_prefix, str) or "{" in filename_prefix or (filename is not None and filename_prefix):
        raise ValueError(
            f"ModelCheckpoint(filename_prefix={filename_prefix!r}) must be a plain str, not with filename=: a "
            'template such as "{epoch}-{val_loss:.2f}" is ModelCheckpoint(filename=...).'
        )
    if filename is None:
        if not isinstance(auto_insert_metric_name, bool):
            raise TypeError(
                f"ModelCheckpoint(auto_insert_metric_name=...) must be a bool, got {auto_insert_metric_name!r}."
            )
        return None
    return FilenameTemplate(filename, auto_insert_metric_name)


def top_k_handler(
    to_save: Mapping,
    saver: Any,
    template: FilenameTemplate | None,
    values: Callable[[], Mapping[str, Any]],
    agree: Callable[[Any], Any],
    **options: Any,
) -> Checkpoint:
    """The handler of `ModelCheckpoint`'s top-k files: named by `template` from `values()` at each save (the epoch,
    the global step and the logged values: Lightning's), or as `Checkpoint` names its files."""
    if template is None:
        return Checkpoint(to_save, saver, **options)
    return TemplateCheckpoint(to_save, saver, template, values, agree, **options)


def check_save_top_k(value: Any) -> int | None:
    """`save_top_k`: how many to keep; None or -1 (Lightning's): all; 0: none (only `save_last`'s)."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value == -1):
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(
            f"ModelCheckpoint(save_top_k=...) must be how many to keep (an int >= 0), -1 or None for all, got {value!r}."
        )
    return value


class TemplateCheckpoint(Checkpoint):
    """A `Checkpoint` whose files `template` names from `values()` at each save. `agree(name)`: the name every rank
    uses (rank 0's: the values of a metric logged without sync_dist differ, and a sharded checkpoint's ranks must
    write into one directory)."""

    def __init__(
        self,
        to_save: Mapping,
        save_handler: Any,
        template: FilenameTemplate,
        values: Callable[[], Mapping[str, Any]],
        agree: Callable[[Any], Any],
        **options: Any,
    ) -> None:
        super().__init__(to_save, save_handler, **options)
        self.template = template
        self._values = values
        self._agree = agree

    def __call__(self, engine: Engine, *event_args: Any) -> None:
        try:
            named: str | BaseException = self.template.render(self._values())
        except Exception as error:  # noqa: BLE001 - raised on every rank below, after the ranks agree
            named = error
        named = self._agree(named)
        if isinstance(named, BaseException):
            raise named
        kept = {storage.split(os.fspath(path))[1] for path in self.saved_paths}
        name, version = named, 0
        while f"{name}.{self.ext}" in kept:
            version += 1
            name = f"{named}-v{version}"
        self.filename_pattern = name.replace("{", "{{").replace("}", "}}") + ".{ext}"
        super().__call__(engine, *event_args)

    def writes_filename(self, filename: str) -> bool:
        return self.template.matcher(self.ext).fullmatch(filename) is not None
