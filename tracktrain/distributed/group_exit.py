"""How a process group started here ends with the script, without aborting a process that finished its work.

Gloo runs collectives on its own threads. A thread that releases a finished collective's tensors needs the GIL (the
tensors have Python objects); if Python is already tearing down, the thread is stopped inside a C++ destructor and
the process aborts (SIGABRT, "terminate called without an active exception"), so torchrun reports a job that
completed as failed. Destroying the group joins those threads, but only once nothing holds it: a user's FSDP module
does (its DTensors keep their DeviceMesh, which keeps the group) until the interpreter's teardown."""

from __future__ import annotations

import atexit
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch.distributed as dist

_state = {"registered": False, "failed": False}
_TASKS = Path("/proc/self/task")  # Linux: the process's threads with their names and scheduler states


def before_init() -> None:
    """Import torch.distributed.nn.functional while no group exists. Its functions take `group=group.WORLD` as a
    default evaluated at import: imported after init_process_group (DCP, pipelining and sharded tensors import it on
    first use), they hold the default group for good, so destroying it never joins its threads (6 of 12 torchrun
    launches of the pipeline example aborted at exit on a loaded 2-core machine). Imported first, the defaults are
    None."""
    import torch.distributed.nn.functional  # noqa: F401


def end_at_a_clean_exit() -> None:
    """At a clean exit the group is destroyed and its threads are given the GIL until none is still releasing a
    collective. Not after an uncaught exception: destroying there could wait on ranks still in a collective
    (torchtitan, too, destroys it on success only). A group the script destroyed itself is not destroyed again."""
    if _state["registered"]:
        return
    _state["registered"] = True
    previous_hook = sys.excepthook

    def note_failure(kind: type[BaseException], value: BaseException, trace: Any) -> None:
        _state["failed"] = True
        previous_hook(kind, value, trace)

    sys.excepthook = note_failure
    atexit.register(_end_if_clean)


def _end_if_clean() -> None:
    if _state["failed"] or not dist.is_available():
        return
    if dist.is_initialized():
        dist.destroy_process_group()
    let_collective_threads_settle()


def let_collective_threads_settle(budget_s: float = 2.0) -> None:
    """Sleep (which hands over the GIL) until no gloo thread is runnable in two checks in a row, or `budget_s` has
    passed. A thread waiting for the GIL gets it during the sleep; one the OS has not run yet shows as runnable. Free
    when the group's threads were joined (none left) and on systems without /proc (nothing to check)."""
    deadline = time.monotonic() + budget_s
    quiet_checks = 0
    while quiet_checks < 2 and time.monotonic() < deadline:
        states = _gloo_thread_states()
        if not states:
            return
        time.sleep(0.005)
        quiet_checks = 0 if "R" in _gloo_thread_states() else quiet_checks + 1


def _gloo_thread_states() -> list[str]:
    """The scheduler state (R running or runnable, S sleeping, ...) of each of this process's gloo threads."""
    states = []
    try:
        tasks = os.listdir(_TASKS)
    except OSError:
        return []
    for task in tasks:
        try:
            stat = (_TASKS / task / "stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        name, _, rest = stat.partition("(")[2].rpartition(")")
        if name.startswith("pt_gloo"):  # the collectives' threads (gloo_tcp_loop only moves bytes)
            states.append(rest.split()[0])
    return states
