"""The README's and the docs pages' code runs as printed: the Quickstart trains on the data it makes and leaves its
checkpoints, and every python block of the README and of docs/ runs in order, in one session, as the pages say."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

# The files whose python blocks run, in this order, in one session: the README's Quickstart makes the data and the
# `Classifier` the pages use, and a page may use what an earlier one made (export.md exports tools.md's averaged
# model; colossal-ai.md's Trainer block trains the engine its launch block built).
PAGES = (
    "README.md",
    "docs/migration/lightning.md",
    "docs/tutorials/callbacks.md",
    "docs/tutorials/tracking.md",
    "docs/tutorials/checkpoints.md",
    "docs/how-to/tools.md",
    "docs/how-to/export.md",
    "docs/how-to/lr-finder.md",
    "docs/tutorials/distributed.md",
    "docs/how-to/ray-train.md",
    "docs/migration/colossal-ai.md",
    "docs/migration/ignite.md",
)

PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _blocks_of(page: str) -> list[str]:
    return PYTHON_BLOCK.findall((ROOT / page).read_text())


def test_every_page_with_python_runs_here():
    """A python block added to any page of docs/ (or the README) is run by this file: its page is in PAGES."""
    with_python = {str(path.relative_to(ROOT)) for path in (ROOT / "docs").rglob("*.md") if _blocks_of(str(path))}
    assert with_python | {"README.md"} == set(PAGES), "add the page to PAGES, where its blocks' names exist"
    assert all(_blocks_of(page) for page in PAGES)


def _quickstart() -> str:
    text = (ROOT / "README.md").read_text().split("\n## Quickstart\n", 1)[1]
    match = PYTHON_BLOCK.search(text)
    assert match, "README has no python block under '## Quickstart'"
    return match.group(1)


def _cli_blocks() -> tuple[str, str]:
    """The README's command-line twin of the Quickstart (shown by docs/getting-started.md too): its config, its command."""
    text = (ROOT / "README.md").read_text().split("[start:cli] -->", 1)[1].split("[end:cli]", 1)[0]
    config = re.search(r"^```yaml\n(.*?)^```", text, re.S | re.M)
    command = re.search(r"^```bash\n(.*?)^```", text, re.S | re.M)
    assert config and command, "README's cli snippet needs a yaml block and a bash block"
    return config.group(1), command.group(1).strip()


def test_the_quickstart_module_fits_from_the_command_line_as_documented(tmp_path):
    """`tracktrain fit --config` trains the Quickstart's module saved as quickstart.py (issue 35): the documented
    config and command, run by the installed console script in the directory that holds them."""

    from tracktrain.checkpoint.discovery import committed_checkpoints

    assert '--8<-- "README.md:cli"' in (ROOT / "docs" / "getting-started.md").read_text()
    config, command = _cli_blocks()
    (tmp_path / "quickstart.py").write_text(_quickstart())  # saved as the user would: importing it trains nothing
    (tmp_path / "quickstart.yaml").write_text(config)
    words = command.split()
    assert words[:2] == ["tracktrain", "fit"] and "--config" in words
    words[0] = str(Path(sys.executable).with_name("tracktrain"))
    result = subprocess.run(words, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    root = tmp_path / "runs" / "cli"
    (checkpoint,) = committed_checkpoints(root / "checkpoints")[0]  # ModelCheckpoint from the config: the best one
    assert checkpoint.summary["global_step"] == 5 * 32 and checkpoint.summary["epoch"] == 5  # --trainer.max_epochs 5
    params = yaml.safe_load(next((root / "lightning_logs").glob("*/hparams.yaml")).read_text())
    assert params["module/lr"] == 0.003  # --model.lr reached Classifier(lr=...) and its hparams
    assert "lr: 0.003" in (root / "config.yaml").read_text()
    assert not (tmp_path / "runs" / "exp1").exists()  # the import did not run the Quickstart's own fit


def _python_blocks() -> list[tuple[str, str]]:
    """(page, block) for every python block of PAGES, in order; the README's first is the Quickstart."""
    blocks = [(page, block) for page in PAGES for block in _blocks_of(page)]
    assert blocks[0] == ("README.md", _quickstart())
    return blocks


# blocks that start a local Ray cluster (~30 s of the default run): the slow run runs every block, these included
RAY = "tracktrain_integrations.ray"


def _run_in_order(blocks: list[tuple[str, str]], tmp_path: Path) -> None:
    """As the pages say: in order, in one session, nothing added (only a line between blocks, to say which one
    failed)."""
    script = "".join(
        f"print('block {number} of {page}', flush=True)\n{block}\n"
        for number, (page, block) in enumerate(blocks, start=1)
    )
    (tmp_path / "page_blocks.py").write_text(script)
    environment = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "page_blocks.py"], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=900
    )
    reached = re.findall(r"^block (\d+ of \S+)", result.stdout, re.M)
    assert result.returncode == 0, f"block {reached[-1] if reached else '?'}: {result.stderr[-3000:]}"
    assert [int(where.split()[0]) for where in reached] == list(range(1, len(blocks) + 1))


def _quickstart_left_its_checkpoints(cwd: Path) -> None:
    """The Quickstart (the first block, as printed: it makes its own data) trained and kept the two best
    checkpoints by `val_acc` and the last one, in `runs/exp1/checkpoints` (the pages after it write elsewhere)."""
    from tracktrain.checkpoint.discovery import committed_checkpoints

    checkpoints, problems = committed_checkpoints(cwd / "runs" / "exp1" / "checkpoints")
    assert problems == []
    names = sorted(Path(checkpoint.url).name for checkpoint in checkpoints)
    assert len(names) == 3 and names[-1].startswith("last_checkpoint_"), names
    best = max(
        checkpoint.manifest["metadata"]["priority"] for checkpoint in checkpoints if "last" not in checkpoint.url
    )
    assert best > 0.7  # its val_acc: it learned


def test_every_python_block_but_ray_runs_as_written_in_order(tmp_path):
    blocks = _python_blocks()
    assert len(blocks) >= 12 and sum(RAY in block for _, block in blocks) == 1
    _run_in_order([(page, block) for page, block in blocks if RAY not in block], tmp_path)
    _quickstart_left_its_checkpoints(tmp_path)


@pytest.mark.slow
def test_every_python_block_runs_as_written_in_order(tmp_path):
    _run_in_order(_python_blocks(), tmp_path)
