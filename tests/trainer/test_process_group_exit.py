"""The process group the Trainer's side started ends with the script: destroyed at a clean exit (left to the
interpreter's teardown, a rank that finished its work could abort, SIGABRT, and torchrun report the job failed),
left alone after an uncaught exception (destroying it there could wait on ranks still in a collective)."""

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


def test_a_script_that_gathers_after_an_fsdp_fit_exits_cleanly_with_its_process_group_destroyed(tmp_path):
    result = _launch(tmp_path, "clean")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "weights_rank0.json").read_text() == (tmp_path / "weights_rank1.json").read_text()
    assert _exits(tmp_path) == [{"group_up": False}, {"group_up": False}]


@pytest.mark.slow  # another torchrun launch (~10 s)
def test_after_an_uncaught_exception_the_process_group_is_left_to_the_interpreter(tmp_path):
    result = _launch(tmp_path, "fail")
    assert result.returncode != 0 and "failed after the fit" in result.stderr
    assert _exits(tmp_path) == [{"group_up": True}, {"group_up": True}]


@pytest.mark.slow
def test_twenty_launches_that_gather_after_an_fsdp_fit_all_exit_0(tmp_path):
    """The abort at exit came in 5 of 18 launches before the process group was destroyed at a clean exit."""
    failures = []
    for launch in range(20):
        out = tmp_path / str(launch)
        out.mkdir()
        result = _launch(out, "clean")
        if result.returncode != 0:
            failures.append((launch, result.returncode, result.stderr[-500:]))
    assert failures == []
