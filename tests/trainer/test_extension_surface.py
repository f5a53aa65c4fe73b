"""The Trainer's extension surface, listed in docs/architecture.md, is all that code outside `tracktrain/trainer/`
uses of a Trainer: a callback, logger or integration reaching for another attribute (a part such as `session` or
`checkpoints`) fails here, and so does a listed name the Trainer lost. The list is read from the page and compared
with the `TrainerSurface` Protocol the hooks are typed by (mypy checks the Trainer against it), so the page, the
types and the code cannot drift apart."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

from tracktrain import Trainer
from tracktrain.trainer.attributes import TRAINER_ATTRIBUTES
from tracktrain.trainer.surface import TrainerSurface

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
EXTENSIONS = [
    ROOT / "tracktrain" / "callbacks",
    ROOT / "tracktrain" / "loggers",
    ROOT / "tracktrain" / "colossal",
    ROOT / "tracktrain" / "tuning",
    ROOT / "tracktrain" / "export",
    ROOT / "integrations" / "tracktrain_integrations",
]
TRAINER_NAMES = {"trainer", "_trainer"}  # the names extension code gives a Trainer
# reads of `trainer.X` where `trainer` is not a Trainer (file, attribute): why
NOT_A_TRAINER = {
    ("integrations/tracktrain_integrations/cli.py", "get"): "a checkpoint's 'trainer' entry, a dict",
}


def listed_surface() -> set[str]:
    section = PAGE.read_text().split("## The Trainer's extension surface", 1)[1].split("\n## ", 1)[0]
    items = [line for line in section.splitlines() if line.startswith(("- ", "  "))]
    return set(re.findall(r"`([a-z_]+)`", "\n".join(items)))


def trainer_reads(source: str) -> set[str]:
    """The attributes read or called on a name that holds a Trainer (`trainer.x`, `self._trainer.x`)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            value = node.value
            if (isinstance(value, ast.Name) and value.id in TRAINER_NAMES) or (
                isinstance(value, ast.Attribute) and value.attr in TRAINER_NAMES
            ):
                found.add(node.attr)
    return found


def extension_reads() -> dict[str, set[str]]:
    used: dict[str, set[str]] = defaultdict(set)
    for place in EXTENSIONS:
        for path in sorted(place.rglob("*.py")) if place.is_dir() else [place]:
            relative = path.relative_to(ROOT).as_posix()
            for name in trainer_reads(path.read_text()):
                if (relative, name) not in NOT_A_TRAINER:
                    used[name].add(relative)
    return used


def test_extensions_use_only_the_listed_surface():
    surface = listed_surface()
    outside = {name: sorted(files) for name, files in extension_reads().items() if name not in surface}
    assert outside == {}, (
        "use a name of the Trainer's extension surface (docs/architecture.md), or add this one there with its "
        f"meaning if it belongs to it: {outside}"
    )


def test_every_listed_name_is_the_trainers():
    missing = {name for name in listed_surface() if not hasattr(Trainer, name) and name not in TRAINER_ATTRIBUTES}
    assert missing == set()
    assert len(listed_surface()) > 40  # the section was read (a renamed heading would leave nothing to check)


def test_the_typed_surface_is_the_listed_one():
    typed = {name for name in vars(TrainerSurface) if not name.startswith("_")}
    assert typed == listed_surface(), "docs/architecture.md and tracktrain.trainer.surface.TrainerSurface differ"


def test_the_scan_sees_reads_through_each_kind_of_name():
    source = "trainer.session.fit\nself._trainer.checkpoints\nself.trainer.global_step()\nmodule.global_step\n"
    assert trainer_reads(source) == {"session", "checkpoints", "global_step"}
