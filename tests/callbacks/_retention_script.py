"""tests/trainer/_resume_script.py (same arguments, same run), with every retention deletion announced on stdout as
`removing NAME` and held back 0.1 s (RETENTION_TEST_HOLD) before it starts, so that a test can kill the run in the window between a newer
checkpoint's commit and an older one's deletion (otherwise microseconds wide). Started by
tests/callbacks/test_retention_after_restarts.py through the kill/resume harness of tests/trainer/test_kill_resume.py.
"""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.trainer import _resume_script  # noqa: E402
from tracktrain.checkpoint.savers import FsspecSaver  # noqa: E402

_remove = FsspecSaver.remove


def _announced_remove(self: FsspecSaver, filename: str) -> None:
    if filename not in self.protected:
        _resume_script.say(f"removing {filename}")
        time.sleep(float(os.environ.get("RETENTION_TEST_HOLD", "0.1")))  # the test sets a long one to be sure
    _remove(self, filename)


FsspecSaver.remove = _announced_remove  # a test harness: the only place this class is patched

if __name__ == "__main__":
    _resume_script.main()
