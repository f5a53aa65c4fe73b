"""A griffe extension for the API reference: the docstrings' reStructuredText code blocks as Markdown fences.

Our docstrings show code as reST does (`.. code-block:: python` or a paragraph ending in `::`, then an indented
block), which mkdocstrings' Markdown would print as a stray directive and a bare indented block. This rewrites each
into a fenced block (highlighted when it names its language), in the docstring mkdocstrings renders only; the source
is not changed. mkdocs.yml loads it as one of the python handler's `extensions`.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import griffe

# `.. code-block:: LANG` or a line ending in `::`, a blank line, then lines indented deeper than the directive
_BLOCK = re.compile(
    r"^(?P<indent>[ ]*)(?:\.\. code-block::[ ]*(?P<lang>\w*)|(?P<lead>\S[^\n]*?):(?P<colon>:))[ ]*\n\n"
    r"(?P<body>(?:(?P=indent)[ ]+\S[^\n]*\n|[ ]*\n)+)",
    re.M,
)


def fence(docstring: str) -> str:
    """`docstring` with its reST code blocks as fenced Markdown blocks."""

    def replace(match: re.Match[str]) -> str:
        indent = match.group("indent")
        body = textwrap.dedent(match.group("body")).strip("\n")
        lead = f"{indent}{match.group('lead')}:\n\n" if match.group("colon") else ""
        language = match.group("lang") or ("text" if match.group("colon") else "python")
        code = textwrap.indent(body, indent, lambda line: True)
        return f"{lead}{indent}```{language}\n{code}\n{indent}```\n\n"

    return _BLOCK.sub(replace, docstring if docstring.endswith("\n") else docstring + "\n").rstrip("\n")


class RstCodeBlocks(griffe.Extension):
    """Rewrites every loaded object's docstring with `fence`."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and "::" in obj.docstring.value:
            obj.docstring.value = fence(obj.docstring.value)
