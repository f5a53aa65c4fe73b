"""The shape of the code, kept by a test: layers import downwards only, no module outside the trainer package reaches
into a Trainer's private names, and modules stay small. What the redesign (issue 20) still has to remove is listed
here by name, so the lists can only shrink: a new upward import, a new private reach or a new long module fails.

Read from the source text (ast), so it costs milliseconds and runs nothing.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tracktrain"
INTEGRATIONS = ROOT / "integrations" / "tracktrain_integrations"

# engine (Events, State, the step) -> handlers/metrics -> trainer -> callbacks/loggers/colossal; a package may import
# its own layer and those below it, never above
LAYERS = {"engine": 0, "handlers": 1, "metrics": 1, "trainer": 2, "callbacks": 3, "loggers": 3, "colossal": 3}

# upward imports the redesign still has to remove (the Trainer builds its default callbacks and logger bridge)
KNOWN_UPWARD = {
    ("tracktrain/trainer/trainer.py", "callbacks"),
    ("tracktrain/trainer/trainer.py", "loggers"),
}

MAX_LINES = 400
# longer modules today, with the length they may not outgrow while they wait to be split
KNOWN_LONG = {
    "tracktrain/engine/engine.py": 850,
    "tracktrain/trainer/trainer.py": 850,
    "tracktrain/handlers/checkpoint.py": 680,
    "integrations/tracktrain_integrations/mlflow.py": 620,
    "tracktrain/storage.py": 470,
    "tracktrain/engine/supervised.py": 430,
    "tracktrain/lease.py": 430,
    "tracktrain/metrics/metric.py": 420,
}


def _modules(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*.py") if "__pycache__" not in path.parts)


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules


def _layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "tracktrain" and len(parts) > 1 and parts[1] in LAYERS else None


def test_layers_import_downwards_only():
    upward = set()
    for path in _modules(PACKAGE):
        own = path.relative_to(PACKAGE).parts[0]
        if own not in LAYERS:
            continue
        for module in _imported_modules(path):
            target = _layer_of(module)
            if target is not None and LAYERS[target] > LAYERS[own]:
                upward.add((_relative(path), target))
    assert upward - KNOWN_UPWARD == set(), "a lower layer imports a higher one: invert the dependency (a protocol)"
    assert KNOWN_UPWARD - upward == set(), "an upward import is gone: take it off KNOWN_UPWARD"


def test_the_core_never_imports_an_integration():
    for path in _modules(PACKAGE):
        for module in _imported_modules(path):
            assert not module.split(".")[0] in {"tracktrain_integrations", "mlflow", "wandb", "torch_xla"}, (
                f"{_relative(path)} imports {module}: the core reaches integrations only through their protocols"
            )


# `trainer._name`, `self.trainer._name`, `self._trainer._name`: a reach into a Trainer's private state
_PRIVATE_REACH = re.compile(r"\btrainer\._[a-z]")


def test_no_module_outside_the_trainer_package_touches_a_trainers_private_names():
    reaches = []
    for path in _modules(PACKAGE) + _modules(INTEGRATIONS):
        if path.is_relative_to(PACKAGE / "trainer"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if _PRIVATE_REACH.search(line.split("#")[0]):
                reaches.append(f"{_relative(path)}:{number}: {line.strip()}")
    assert reaches == [], "use the Trainer's public surface instead:\n" + "\n".join(reaches)


def test_modules_stay_small():
    too_long = {}
    for path in _modules(PACKAGE) + _modules(INTEGRATIONS):
        lines = len(path.read_text().splitlines())
        limit = KNOWN_LONG.get(_relative(path), MAX_LINES)
        if lines > limit:
            too_long[_relative(path)] = (lines, limit)
    assert too_long == {}, "split these modules (lines, limit): one job each"


def test_the_architecture_checks_can_fail():
    """The scans see what they must: a private reach and an upward import written here are found."""
    assert _PRIVATE_REACH.search("        self.trainer._stop_now()")
    assert not _PRIVATE_REACH.search("        trainer.request_stop()")
    assert _layer_of("tracktrain.callbacks.base") == "callbacks" and _layer_of("tracktrain.storage") is None
    assert ("tracktrain/trainer/trainer.py", "callbacks") in KNOWN_UPWARD
