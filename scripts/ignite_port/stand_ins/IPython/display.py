"""`display` and `HTML` of a notebook, as text on stdout."""

from __future__ import annotations


class HTML:
    def __init__(self, data=None, **kwargs):
        self.data = data

    def __repr__(self):
        return f"HTML({self.data!r})"


def display(*objects, **kwargs):
    for obj in objects:
        print(obj)
