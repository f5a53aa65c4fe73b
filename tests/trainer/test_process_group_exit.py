"""The process group the Trainer's side started ends with the script: destroyed at a clean exit (left to the
interpreter's teardown, a rank that finished its work could abort, SIGABRT, and torchrun report the job failed),
left alone after an uncaught exception (destroying it there could wait on ranks still in a collective). The abort is
made rarer, not gone (see the clean-exit test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import _processes

SCRIPT = Path(__file__).with_name("_gather_after_fit_script.py")


def _launch(out: Path, ending: str) -> _processes.Command:
    return _processes.run(_processes.torchrun(SCRIPT, out, ending), timeout=120)


def _exits(out: Path) -> list[dict]:
    return [json.loads((out / f"exit_rank{rank}.json").read_text()) for rank in range(2)]


def test_a_script_that_gathers_after_an_fsdp_fit_has_its_process_group_destroyed_before_the_interpreter_ends(tmp_path):
    """The group is gone when the script's own exit handlers run (before the interpreter's teardown). That is not
    enough to rule the abort out: it still came in 1 of ~23 launches on the loaded 2-core machine (5 of 18 before),
    so the launch's exit status is not asserted here; see the closing note of the session that added this."""
    result = _launch(tmp_path, "clean")
    assert (tmp_path / "weights_rank0.json").read_text() == (tmp_path / "weights_rank1.json").read_text(), result.stderr
    assert _exits(tmp_path) == [{"group_up": False}, {"group_up": False}]


@pytest.mark.slow  # another torchrun launch (~10 s)
def test_after_an_uncaught_exception_the_process_group_is_left_to_the_interpreter(tmp_path):
    result = _launch(tmp_path, "fail")
    assert result.returncode != 0 and "failed after the fit" in result.stderr
    assert _exits(tmp_path) == [{"group_up": True}, {"group_up": True}]
