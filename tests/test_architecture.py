"""The shape of the code, kept by a test: layers import downwards only, no module imports another's private names,
no module outside the trainer package reaches into a Trainer's private names, and no modules import each other. What
is still to remove is listed here by name, so the lists can only shrink: a new upward import or private reach fails.
(No line cap: a module has one job, whatever its length; issue 34.)

Read from the source text (ast), so it costs milliseconds and runs nothing.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tracktrain"
INTEGRATIONS = ROOT / "integrations" / "tracktrain_integrations"

# engine (Events, State, the step) -> checkpoint -> handlers/metrics -> trainer -> callbacks/loggers -> colossal; a
# package may import its own layer and those below it, never above
LAYERS = {
    "engine": 0,
    "checkpoint": 1,
    "handlers": 2,
    "metrics": 2,
    "trainer": 3,
    "callbacks": 4,
    "loggers": 4,
    "colossal": 5,
    "tuning": 5,
}

# the one deliberate upward reach: the product's defaults (a progress bar, a ModelCheckpoint, a CSVLogger, the logger
# bridge) are chosen in one module; the rest of the Trainer meets them through the Callback/Checkpointer/Logger seams
KNOWN_UPWARD = {
    ("tracktrain/trainer/defaults.py", "callbacks"),
    ("tracktrain/trainer/defaults.py", "loggers"),
}


def _modules(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*.py") if "__pycache__" not in path.parts)


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _imported_modules(path: Path, for_annotations: bool = False) -> set[str]:
    return _imports_in(path.read_text(), str(path), for_annotations)


def _imports_in(source: str, filename: str = "<text>", for_annotations: bool = False) -> set[str]:
    """What `source` imports when it runs (imports under `if TYPE_CHECKING:` are for annotations only), and with
    `for_annotations` those too: two modules that name each other's types still lean on each other."""
    tree = ast.parse(source, filename)
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            if not for_annotations:
                node.body = []
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)  # the name may be a module
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
            assert module.split(".")[0] not in {"tracktrain_integrations", "mlflow", "wandb", "torch_xla"}, (
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


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports: when it runs, lazily inside a function, or for annotations under
    `if TYPE_CHECKING:` (a circle hidden by a lazy or a type-only import is still a circle)."""
    paths = {_module_name(path): path for path in _modules(PACKAGE)}
    graph = {}
    for name, path in paths.items():
        targets = set()
        for imported in _imported_modules(path, for_annotations=True):
            parts = imported.split(".")
            while parts and ".".join(parts) not in paths:
                parts.pop()
            if parts and ".".join(parts) != name:
                targets.add(".".join(parts))
        graph[name] = targets
    return graph


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The groups of modules that import each other in a loop (strongly connected components, Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph.get(module, ()):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == module:
                    break
            if len(group) > 1:
                circles.append(group)

    for module in graph:
        if module not in index:
            visit(module)
    return circles


def test_no_import_circles():
    circles = _circles(_import_graph())
    assert circles == [], (
        "modules that import each other, type-only imports included: let the shared types live where both can import "
        "them (a Protocol in the lower module, as `tracktrain.trainer.surface`, or the shared part moved down)"
    )


def test_the_architecture_checks_can_fail():
    """The scans see what they must: a private reach and an upward import written here are found."""
    assert _PRIVATE_REACH.search("        self.trainer._stop_now()")
    assert not _PRIVATE_REACH.search("        trainer.request_stop()")
    assert _layer_of("tracktrain.callbacks.base") == "callbacks" and _layer_of("tracktrain.storage") is None
    source = (
        "from typing import TYPE_CHECKING\nimport tracktrain.loggers.base\n"
        "if TYPE_CHECKING:\n    from tracktrain.callbacks.progress import TrainerProgressBar\n"
    )
    assert {_layer_of(module) for module in _imports_in(source)} == {None, "loggers"}
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    type_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tracktrain.engine.engine import Engine\n"
    assert _imports_in(type_only) == {"typing", "typing.TYPE_CHECKING"}  # the layers: not a run-time dependency
    assert "tracktrain.engine.engine" in _imports_in(type_only, for_annotations=True)  # the circles: a dependency
    assert "tracktrain.storage" in _imports_in("from tracktrain import storage\n")


# private to the package, not to a module: `tracktrain._lazy` builds every `__init__`'s lazy attributes
PACKAGE_PRIVATE = {"_lazy"}


def _private_imports(source: str) -> list[str]:
    """`from tracktrain... import _name` and imports of `tracktrain...._module`: one module taking another's private
    names (a dunder is not private)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            package = node.module.split(".")
            if package[0] not in {"tracktrain", "tracktrain_integrations"}:
                continue
            names = package + [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [
                part for alias in node.names if alias.name.startswith("tracktrain") for part in alias.name.split(".")
            ]
        else:
            continue
        found += [name for name in names if name.startswith("_") and not name.startswith("__")]
    return [name for name in found if name not in PACKAGE_PRIVATE]


def test_no_module_imports_another_modules_private_names():
    reaches = {}
    for path in _modules(PACKAGE) + _modules(INTEGRATIONS):
        private = _private_imports(path.read_text())
        if private:
            reaches[_relative(path)] = private
    assert reaches == {}, "make the name public where it lives (one job, used by others) or keep the use inside"
    assert _private_imports("from tracktrain.metrics.metric import Metric, _identity") == ["_identity"]
    assert _private_imports("import tracktrain.engine._signature\nfrom tracktrain import __version__") == ["_signature"]


# Classes that keep the Trainer given to them (issue 47: a part is built with what it uses). Kept by design, as the
# APIs they reproduce keep theirs: Lightning's `module.trainer`, Lightning's `Tuner(trainer)`, Ignite's EarlyStopping
# (its trainer Engine) and the Colossal-AI hook adapter (Colossal-AI's Trainer, not ours).
KEEPS_A_TRAINER_BY_DESIGN = {
    "tracktrain/trainer/module.py:LoopModule",
    "tracktrain/tuning/tuner.py:Tuner",
    "tracktrain/handlers/early_stopping.py:EarlyStopping",
    # Ignite's ReduceLROnPlateauScheduler(trainer=...) writes its history to that Engine's state, as Ignite's does
    "tracktrain/handlers/param_scheduler.py:ReduceLROnPlateauScheduler",
    "tracktrain/colossal/trainer/trainer.py:_HookCallback",
}
# the Trainer's own parts that still keep it: to be built with what they use instead, so this list only shrinks
KEEPS_A_TRAINER_TO_REMOVE = {
    "tracktrain/trainer/session.py:Session",
}


def _classes_keeping_a_trainer(source: str, filename: str = "<text>") -> set[str]:
    """The classes with a method that stores its `trainer` argument on `self` (`self.x = trainer`, or in a tuple)."""
    keeping = set()
    for cls in ast.walk(ast.parse(source, filename)):
        if not isinstance(cls, ast.ClassDef):
            continue
        for node in ast.walk(cls):
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            pairs = (
                zip(targets[0].elts, value.elts)
                if len(targets) == 1 and isinstance(targets[0], ast.Tuple) and isinstance(value, ast.Tuple)
                else ((target, value) for target in targets)
            )
            for target, stored in pairs:
                on_self = (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                )
                if on_self and isinstance(stored, ast.Name) and stored.id == "trainer":
                    keeping.add(cls.name)
    return keeping


def test_no_part_keeps_the_trainer():
    keeping = {
        f"{_relative(path)}:{name}"
        for path in _modules(PACKAGE) + _modules(INTEGRATIONS)
        for name in _classes_keeping_a_trainer(path.read_text(), str(path))
    }
    assert keeping - KEEPS_A_TRAINER_BY_DESIGN - KEEPS_A_TRAINER_TO_REMOVE == set(), (
        "a part keeps the Trainer: give it what it uses when it is built or called (a value, the strategy, a logger)"
    )
    assert KEEPS_A_TRAINER_TO_REMOVE - keeping == set(), "a part no longer keeps the Trainer: take it off the list"
    example = "class Part:\n    def __init__(self, trainer):\n        self.strategy, self._trainer = trainer.strategy, trainer\n"
    assert _classes_keeping_a_trainer(example) == {"Part"}
    assert (
        _classes_keeping_a_trainer("class Part:\n    def f(self, trainer):\n        self.step = trainer.step\n")
        == set()
    )


# A Protocol of the Trainer written for one part (`TrainerFor<the part>`, or any Protocol over the extension surface)
# means that part is handed the whole Trainer. `ModuleHost` is the surface a module's own methods call, by design.
TRAINER_PROTOCOLS_BY_DESIGN = {"tracktrain/trainer/surface.py:ModuleHost"}
# those still there: each goes when its part is built with what it uses, so this list only shrinks
TRAINER_PROTOCOLS_TO_REMOVE = {
    "tracktrain/trainer/session.py:TrainerForSession",
}
_SURFACES = {"TrainerSurface", "ModuleHost"}


def _trainer_protocols(source: str, filename: str = "<text>") -> set[str]:
    """The classes named `TrainerFor...`, and the Protocols built on the Trainer's surface or on such a class."""
    found = set()
    for cls in ast.walk(ast.parse(source, filename)):
        if not isinstance(cls, ast.ClassDef):
            continue
        bases = {base.id if isinstance(base, ast.Name) else getattr(base, "attr", "") for base in cls.bases}
        on_a_trainer = bool(bases & _SURFACES) or any(base.startswith("TrainerFor") for base in bases)
        if cls.name.startswith("TrainerFor") or ("Protocol" in bases and on_a_trainer):
            found.add(cls.name)
    return found


def test_no_part_is_typed_by_a_protocol_of_the_trainer():
    protocols = {
        f"{_relative(path)}:{name}"
        for path in _modules(PACKAGE) + _modules(INTEGRATIONS)
        for name in _trainer_protocols(path.read_text(), str(path))
    }
    assert protocols - TRAINER_PROTOCOLS_BY_DESIGN - TRAINER_PROTOCOLS_TO_REMOVE == set(), (
        "a Protocol of the Trainer for one part: build the part with the values and collaborators it reads instead"
    )
    assert TRAINER_PROTOCOLS_TO_REMOVE - protocols == set(), "a Trainer Protocol is gone: take it off the list"
    example = (
        "class TrainerForCheckpoints(TrainerSurface, Protocol): ...\n"
        "class Reads(surface.ModuleHost, Protocol): ...\n"
        "class Own(Protocol): ...\n"
        "class Checkpoints(TrainerSurface): ...\n"
    )
    assert _trainer_protocols(example) == {"TrainerForCheckpoints", "Reads"}
