"""Refusals: errors that are tracktrain's answer to what it was asked, not a failure inside it — another process
holds the checkpoint directory's lease, a checkpoint does not match its manifest or would run code. Their message
says what happened and the fix, so a script that does not catch one ends with that message alone: the traceback
would only show tracktrain's own frames.
"""

from __future__ import annotations

import sys
from types import TracebackType

__all__ = ["Refusal", "show_refusals_plainly"]


class Refusal(Exception):
    """Mixed into an error class whose message is the whole story (what, the value, the fix): uncaught, it ends the
    program with that message and exit status 1, without a traceback (`show_refusals_plainly`)."""


_installed = {"hook": False}


def show_refusals_plainly() -> None:
    """From now on an uncaught `Refusal` prints as `Name: message` (the hook before it gets no traceback and no
    chained errors); any other exception as before. Once per process; every other hook keeps its place in the chain
    (the process group's exit notes the failure through it)."""
    if _installed["hook"]:
        return
    _installed["hook"] = True
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, trace: TracebackType | None) -> None:
        if isinstance(value, Refusal):
            value.__cause__, value.__suppress_context__, value.__traceback__, trace = None, True, None, None
        previous(kind, value, trace)

    sys.excepthook = hook
