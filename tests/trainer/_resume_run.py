"""The kill/resume harness around tests/trainer/_resume_script.py (`Trainer(resume="auto")`): one start of the script
as a `Run`, whose output lines are read as they come and which can be killed at a chosen line. Used by
tests/trainer/test_kill_resume.py, tests/test_lease.py and tests/callbacks/test_retention_after_restarts.py."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from tests import _processes

SCRIPT = Path(__file__).with_name("_resume_script.py")
STEPS = 48  # what the script trains: 4 epochs of 12 batches


class Run:
    """One start of the script (`script`, default SCRIPT; under torchrun for several ranks): its output lines as
    they come, and a way to kill it at a chosen line. A deadline missed fails with the stack of every process of
    the run."""

    def __init__(
        self, root: str, out: Path, data: str | int, seed: int | None = None, ranks: int = 1, script: Path | None = None
    ) -> None:
        arguments = [script or SCRIPT, root, out, data, *([seed] if seed is not None else [])]
        # torchrun, as users start DDP (gloo on this CPU)
        command = _processes.torchrun(*arguments, nproc=ranks) if ranks > 1 else [sys.executable, *map(str, arguments)]
        self.process = _processes.Command(command)
        self.stderr = ""

    @property
    def lines(self) -> list[str]:
        return self.process.lines

    def read_until(self, predicate, timeout: float = 120.0) -> str | None:
        """The first line from here on for which `predicate` holds; None when the process ended first."""
        return self.process.wait_for(predicate, timeout)

    def kill(self) -> None:
        """SIGKILL every process of the run at once (torchrun, its ranks, their data-loader workers), as a node
        failure would."""
        self.process.kill(signal.SIGKILL)

    def finish(self, timeout: float = 180.0) -> int:
        status = self.process.wait(timeout)
        self.stderr = self.process.stderr
        return status

    def resumed_from(self) -> tuple[str, int]:
        line = next(line for line in self.lines if line.startswith("resumed "))
        _, path, step, _ = line.split(" ")
        return path, int(step)

    @property
    def run_seed(self) -> int:
        return int(next(line for line in self.lines if line.startswith("resumed ")).split(" ")[3])
