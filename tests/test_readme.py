"""The README's code runs as printed: its quickstart trains on the data it makes and leaves its checkpoints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _block(heading: str) -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(rf"## {heading}\n\n(?:[^`#][^\n]*\n)*\n?```python\n(.*?)```", text, re.S)
    assert match, f"README has no python block under '## {heading}'"
    return match.group(1)


def test_quickstart_trains_and_checkpoints(tmp_path):
    check = (
        "\nassert trainer.callback_metrics['val_acc'] > 0.7, trainer.callback_metrics\n"
        "print('steps', trainer.global_step)\n"
    )
    script = tmp_path / "quickstart.py"
    script.write_text(_block("Quickstart") + check)  # as printed: it makes its own data
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    checkpoints = sorted(
        p.name for p in (tmp_path / "runs" / "exp1" / "checkpoints").iterdir() if not p.name.endswith(".manifest.json")
    )
    assert checkpoints[-1].startswith("last_checkpoint_") and len(checkpoints) == 3  # top-2 by val_acc, and last


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


# blocks that start a local Ray cluster (~30 s of the default run): the slow run runs every block, these included
RAY = "tracktrain_integrations.ray"


def _run_in_order(blocks: list[str], tmp_path: Path) -> None:
    """As the README says: in order, in one session, nothing added (only a line between blocks, to say which one
    failed)."""
    script = "".join(
        f"print('README block {number}', flush=True)\n{block}\n" for number, block in enumerate(blocks, start=1)
    )
    (tmp_path / "readme_blocks.py").write_text(script)
    environment = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "readme_blocks.py"], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=900
    )
    reached = re.findall(r"README block (\d+)", result.stdout)
    assert result.returncode == 0, f"block {reached[-1] if reached else '?'}: {result.stderr[-3000:]}"
    assert reached == [str(number) for number in range(1, len(blocks) + 1)]


def test_every_python_block_but_ray_runs_as_written_in_order(tmp_path):
    blocks = _python_blocks()
    assert len(blocks) >= 7 and sum(RAY in block for block in blocks) == 1
    _run_in_order([block for block in blocks if RAY not in block], tmp_path)


@pytest.mark.slow
def test_every_python_block_runs_as_written_in_order(tmp_path):
    _run_in_order(_python_blocks(), tmp_path)
