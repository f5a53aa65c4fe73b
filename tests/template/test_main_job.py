"""The README's first set-up command, `scripts/main-job.sh`, as a new user runs it (2 epochs instead of 5)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_main_job_generates_trains_and_says_how_to_open_the_run(tmp_path):
    environment = {**os.environ, "EPOCHS": "2"}
    result = subprocess.run(["bash", str(REPOSITORY / "scripts" / "main-job.sh"), str(tmp_path)], env=environment,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    database = tmp_path / "digits_classifier" / "runs" / "mlflow.db"
    assert f"mlflow ui --backend-store-uri sqlite:///{database}" in result.stdout
    accuracy = float(re.search(r"final metrics after 46 steps: .*val_accuracy (\S+)", result.stdout).group(1))
    assert accuracy > 0.6  # 2 epochs of an MLP on digits
    assert database.is_file()
    assert "100%" in result.stdout + result.stderr  # the progress bar was drawn
