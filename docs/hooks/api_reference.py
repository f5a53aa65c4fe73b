"""The API reference's entries, computed from the packages' exports (`__all__` and the lazy names of `_lazy.py`).

An API page holds one line `<!-- api: PACKAGE -->`; at build time MkDocs calls `on_page_markdown`, which replaces it
with one mkdocstrings entry (`::: path`) per public name, at the module that defines it, so a name moved to another
module (or a new export) needs no edit here. A package of `SHARED_PAGES` and those of its modules listed here share one
page, a marker each. A name exported by several of the documented packages is rendered once, on the page of the most
specific package (`tracktrain.Trainer` on `tracktrain.trainer`'s page); the others link to it. `tests/test_docs.py`
reads the same lists to check that every public name has a docstring.
"""

from __future__ import annotations

import importlib
import re
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# the packages the reference documents, in the order of its pages
PACKAGES = (
    "tracktrain",
    "tracktrain.trainer",
    "tracktrain.callbacks",
    "tracktrain.loggers",
    "tracktrain.trainer.strategies",
    "tracktrain.engine",
    "tracktrain.handlers",
    "tracktrain.metrics",
    "tracktrain.distributed",
    "tracktrain.distributed.ranks",
    "tracktrain.distributed.boundary",
    "tracktrain.distributed.preemption",
    "tracktrain.distributed.logger",
    "tracktrain.distributed.data",
    "tracktrain.export",
    "tracktrain.export.onnx",
    "tracktrain.tuning",
    "tracktrain.colossal",
    "tracktrain_integrations.mlflow",
    "tracktrain_integrations.mlflow_model",
    "tracktrain_integrations.wandb",
    "tracktrain_integrations.tensorboard",
    "tracktrain_integrations.ray",
    "tracktrain_integrations.optuna",
    "tracktrain_integrations.cli",
)

# packages whose modules share one page, each module a section of it (`## module`, its names one level below)
SHARED_PAGES = ("tracktrain.distributed", "tracktrain.export", "tracktrain_integrations")

MARKER = re.compile(r"^<!-- api: ([\w.]+) -->$", re.M)


def public_names(package: str) -> list[str]:
    """The names `package` exports: its `__all__` and its lazy names, without dunders (`__version__`)."""
    module = importlib.import_module(package)
    names = set(getattr(module, "__all__", ())) | set(getattr(module, "_LAZY", {}))
    return sorted(name for name in names if not name.startswith("__"))


def reference_path(package: str, name: str) -> str:
    """Where mkdocstrings finds `package.name`: the class or function at the module that defines it, or, for a
    value (a tuple, a dict), the name in the module its package loads it from lazily, else in the package, whose
    imports griffe follows."""
    imported = importlib.import_module(package)
    value: Any = getattr(imported, name)
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str) and "<" not in qualname and qualname.endswith(name):
        return f"{module}.{qualname}"
    return f"{getattr(imported, '_LAZY', {}).get(name, package)}.{name}"


@cache
def home_pages() -> dict[str, str]:
    """Each documented path -> the package whose page renders it: the most specific package exporting it."""
    homes: dict[str, str] = {}
    for package in PACKAGES:
        for name in public_names(package):
            path = reference_path(package, name)
            if path not in homes or len(package) > len(homes[path]):
                homes[path] = package
    return homes


def shared_page(package: str) -> str | None:
    """The package of `SHARED_PAGES` whose page `package` (that package or one of its modules) is a section of."""
    return next((top for top in SHARED_PAGES if package == top or package.startswith(f"{top}.")), None)


def page_of(package: str) -> str:
    """The API page of `package`, relative to docs/: a module of a `SHARED_PAGES` package is on that package's."""
    return f"api/{shared_page(package) or package}.md"


def entries(package: str) -> str:
    """The Markdown replacing `<!-- api: package -->`: the names this page renders, then those it links to."""
    rendered, linked = [], []
    level = 3 if shared_page(package) else 2  # on a shared page, under the module's own heading
    for name in public_names(package):
        path = reference_path(package, name)
        home = home_pages()[path]
        if home == package:
            rendered.append(f"::: {path}\n    options:\n      heading: {name}\n      heading_level: {level}\n")
        else:
            linked.append(f"| [`{name}`][{path}] | [`{home}`]({Path(page_of(home)).name}) |")
    text = "\n".join(rendered)
    if linked:
        table = "| name | documented on |\n|---|---|\n" + "\n".join(linked)
        text += f"\n{'#' * level} Also exported here\n\n{table}\n"
    return text


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs hook: expand each `<!-- api: PACKAGE -->` line of a page."""
    return MARKER.sub(lambda match: entries(match.group(1)), markdown)
