"""The docs' "A new project from the template" commands (docs/tutorials/template.md, moved there from the README),
pasted as they are (only the output folder is the test's): generate, install in one pinned command, run the
project's own tests, train."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]


def readme_block() -> str:
    text = (REPOSITORY / "docs" / "tutorials" / "template.md").read_text()
    section = text.split("## A new project from the template", 1)[1]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow
def test_the_docs_template_commands_generate_install_test_and_train(tmp_path):
    block = readme_block()
    assert "/tmp/projects" in block
    script = block.replace("/tmp/projects", str(tmp_path))
    environment = {key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"}
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=REPOSITORY,
        env=environment,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    project = tmp_path / "fraud_model"
    assert "final metrics after" in result.stdout
    installed = subprocess.run(
        [str(project / ".venv" / "bin" / "pip"), "freeze"], capture_output=True, text=True, timeout=120
    ).stdout
    assert re.search(r"^torch==2\.13\.0(\+cpu)?$", installed, re.M), installed  # the pinned build
    assert not [line for line in installed.splitlines() if line.lower().startswith("nvidia-")]  # no CUDA wheels
    pins = dict(
        line.split("==")
        for line in (REPOSITORY / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    for line in installed.splitlines():
        if "==" in line:
            name, version = line.split("==")
            if name in pins:
                assert pins[name] == version.split("+")[0], line  # every pinned package at its pin
