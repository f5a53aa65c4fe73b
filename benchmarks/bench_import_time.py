#!/usr/bin/env python
"""Import time of tracktrain next to torch, PyTorch-Ignite and Lightning, each in a fresh interpreter.

Each statement runs in its own `python -c` subprocess that times only the import (interpreter start-up is
reported apart, as the whole process's wall time). Statements are interleaved and shuffled per repeat after
one warm-up run each; the table shows medians.

    .venv/bin/python benchmarks/bench_import_time.py --quick   # smoke test: 1 run each, no warm-up, no Lightning
    .venv/bin/python benchmarks/bench_import_time.py --repeats 7 --json /tmp/import_time.json

Bytecode: the children write and read their .pyc files under a private temporary PYTHONPYCACHEPREFIX (and
PYTHONDONTWRITEBYTECODE is dropped for them), so every package is measured with warm bytecode, including an
editable tracktrain whose source tree may have no __pycache__, and no file outside the temporary folder is
written. Pass --no-pycache-prefix to use the environment as it is.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.util import find_spec

import harness as h

# label, statement, module that must be importable for the row to run
STATEMENTS: list[tuple[str, str, str]] = [
    ("import tracktrain", "import tracktrain", "tracktrain"),
    (
        "import tracktrain; from tracktrain.engine import create_supervised_trainer",
        "import tracktrain; from tracktrain.engine import create_supervised_trainer",
        "tracktrain",
    ),
    ("import torch", "import torch", "torch"),
    ("import ignite.engine", "import ignite.engine", "ignite"),
]
LIGHTNING_STATEMENT = ("import lightning.pytorch", "import lightning.pytorch", "lightning")

CHILD = """\
import time
_start = time.perf_counter()
{statement}
_elapsed = time.perf_counter() - _start
import sys
print("RESULT", _elapsed, "torch" in sys.modules)
"""

BASELINE = "import torch"
PEER = "import ignite.engine"


def run_child(statement: str, env: dict[str, str], cwd: str) -> tuple[float, bool, float]:
    """(seconds spent importing, whether torch ended up loaded, wall seconds of the whole process)."""
    started = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-c", CHILD.format(statement=statement)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    if completed.returncode != 0:
        raise RuntimeError(f"`{statement}` failed in a subprocess:\n{completed.stderr.strip()}")
    for line in completed.stdout.splitlines():
        if line.startswith("RESULT "):
            _, seconds, torch_loaded = line.split()
            return float(seconds), torch_loaded == "True", wall
    raise RuntimeError(f"`{statement}` printed no result:\n{completed.stdout}\n{completed.stderr}")


def main(argv: list[str] | None = None) -> int:
    args = h.parse(
        __doc__,
        argv,
        {"repeats": (7, 1, "timed runs per statement, interleaved after a warm-up run each (none with --quick)")},
        positive=["repeats"],
        options=lambda add: add(
            "--no-pycache-prefix", action="store_true", help="do not redirect bytecode to a temporary folder"
        ),
    )
    statements = STATEMENTS + ([] if args.no_lightning or args.quick else [LIGHTNING_STATEMENT])
    available = {label: statement for label, statement, module in statements if find_spec(module) is not None}
    missing = {label: "not installed" for label, _, _ in statements if label not in available}
    workdir = tempfile.mkdtemp(prefix="tracktrain-importtime-")
    env = dict(os.environ)
    if not args.no_pycache_prefix:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = os.path.join(workdir, "pycache")
    walls: dict[str, list[float]] = {label: [] for label in available}
    loads_torch: dict[str, str] = {}

    def run(label: str) -> float:
        seconds, torch_loaded, wall = run_child(available[label], env, workdir)
        walls[label].append(wall * 1e3)
        loads_torch[label] = "yes" if torch_loaded else "no"
        return seconds * 1e3

    try:
        for label in [] if args.quick else list(available):  # warm-up: bytecode written, OS cache filled
            try:
                run_child(available[label], env, workdir)
            except RuntimeError as error:
                if label.startswith("import tracktrain"):
                    raise
                print(f"skipping `{label}`: {error}", file=sys.stderr)
                missing[label] = "import fails"
                del available[label], walls[label]
        samples = h.measure(list(available), args.repeats, random.Random(args.seed), run, warmup=False)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    bytecode = "as the environment has it" if args.no_pycache_prefix else "warm, in a private PYTHONPYCACHEPREFIX"
    print(f"# Import time (fresh interpreter per run)\n\npython {sys.version.split()[0]}; bytecode {bytecode}")
    wall = {label: statistics.median(values) for label, values in walls.items()}
    rows = h.compare(
        "import", samples, (BASELINE, PEER), "ms", args.stat, process_wall_ms=wall, loads_torch=loads_torch
    )
    h.report(rows, "process_wall_ms", "loads_torch", decimals=1)
    print(
        "value: time spent in the import statement only; process_wall_ms: the whole `python -c` run, interpreter "
        f"start-up and exit included. Not run: {missing or 'none'}."
    )
    return h.finish(args, {"python": sys.version.split()[0], "arguments": vars(args), "rows": rows}, [])


if __name__ == "__main__":
    sys.exit(main())
