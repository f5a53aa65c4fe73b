"""Project-wide promises: public import paths, a core that never imports integrations, fast import, set-up."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import tracktrain
import tracktrain.engine

ROOT = Path(__file__).resolve().parents[1]

ENGINE_EXPORTS = [
    "Engine",
    "Events",
    "EventEnum",
    "EventsList",
    "CallableEventWithFilter",
    "RemovableEventHandle",
    "State",
    "DeterministicEngine",
    "create_supervised_trainer",
    "create_supervised_evaluator",
    "supervised_training_step",
    "supervised_training_step_amp",
    "supervised_training_step_tpu",
    "supervised_evaluation_step",
    "supervised_evaluation_step_amp",
]


@pytest.mark.parametrize("name", ENGINE_EXPORTS)
def test_engine_exports(name):
    assert name in tracktrain.engine.__all__
    assert getattr(tracktrain.engine, name) is not None


@pytest.mark.parametrize(
    "name",
    ["Engine", "Events", "State", "DeterministicEngine", "create_supervised_trainer", "create_supervised_evaluator"],
)
def test_common_names_are_reexported(name):
    assert getattr(tracktrain, name) is getattr(tracktrain.engine, name)


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = tracktrain.engine.nope


def _python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout


def test_import_tracktrain_loads_neither_torch_nor_trackers():
    out = _python(
        "import sys, tracktrain, tracktrain.engine\n"
        "print(sorted(m for m in ('torch', 'mlflow', 'wandb', 'torch_xla', 'tracktrain_integrations') "
        "if m in sys.modules))"
    )
    assert out.strip() == "[]"


def test_the_testing_helpers_load_neither_torch_nor_trackers():
    """tracktrain_integrations.testing (MlflowServer, free_port) serves the tests and the benchmark scripts alike: the
    server runs as a child process, and importing the helpers costs no torch or tracker import."""
    out = _python(
        "import sys, tracktrain_integrations.testing\n"
        "print(sorted(m for m in ('torch', 'mlflow', 'wandb', 'tracktrain') if m in sys.modules))"
    )
    assert out.strip() == "[]"


def test_core_imports_with_integrations_blocked():
    """Every module of the core imports while mlflow, wandb, torch_xla and the integrations cannot."""
    code = """
import importlib, pkgutil, sys
BLOCKED = ("mlflow", "wandb", "torch_xla", "tracktrain_integrations", "tensorboard", "s3fs", "ray")
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"blocked: {name}")
sys.meta_path.insert(0, Block())
import tracktrain
names = [m.name for m in pkgutil.walk_packages(tracktrain.__path__, "tracktrain.")]
for name in names:
    importlib.import_module(name)
print(len(names))
"""
    assert int(_python(code)) >= 6


def test_py_typed_marker_ships():
    assert (Path(tracktrain.__file__).parent / "py.typed").exists()


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```bash\n(.+?)\n```", text)


def test_ci_runs_the_readme_test_command():
    main_job, tests = _readme_commands()[:2]
    ci = (ROOT / ".ci" / "run").read_text()
    assert tests in ci.splitlines()
    assert "pytest" in tests and "setup-venv.sh" in tests
    script = main_job.split()[0]  # the main job is a script of the repository (run by tests/template/test_main_job.py)
    assert script == "scripts/main-job.sh" and (ROOT / script).exists()


def test_constraints_pin_torch():
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    assert "torch==2.13.0" in lines
    assert "torch==2.13.0" in (ROOT / "scripts" / "setup-venv.sh").read_text()
