"""The README's main job, run as a new user runs it (shortened)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_digits_main_job_trains_and_reports_each_epoch():
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "digits_mlp.py"), "--epochs", "5"],
        check=True, capture_output=True, text=True, timeout=300,
    )
    epochs = re.findall(r"epoch\s+(\d+)/5\s+train_loss ([\d.]+)\s+val_loss ([\d.]+)\s+val_accuracy ([\d.]+)", result.stdout)
    assert [int(e[0]) for e in epochs] == [1, 2, 3, 4, 5]
    train_losses = [float(e[1]) for e in epochs]
    assert train_losses[-1] < train_losses[0]
    assert float(epochs[-1][3]) > 0.9, result.stdout  # an MLP reaches ~97% on digits
