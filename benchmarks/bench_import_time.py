#!/usr/bin/env python
"""Import time of tracktrain next to torch, PyTorch-Ignite and Lightning, each in a fresh interpreter.

Each statement runs in its own `python -c` subprocess that times only the import. Statements are interleaved and
shuffled per repeat after one warm-up run each; the table shows medians.

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
import subprocess
import sys
import tempfile
from importlib.util import find_spec

import harness as h

# statement -> the module that must be importable for its row to run
STATEMENTS = {
    "import tracktrain": "tracktrain",
    "import tracktrain; from tracktrain.engine import create_supervised_trainer": "tracktrain",
    "import torch": "torch",
    "import ignite.engine": "ignite",
}
LIGHTNING_STATEMENT = {"import lightning.pytorch": "lightning"}

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


def run_child(statement: str, env: dict[str, str], cwd: str) -> tuple[float, bool]:
    """(seconds spent importing, whether torch ended up loaded)."""
    completed = subprocess.run(
        [sys.executable, "-c", CHILD.format(statement=statement)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"`{statement}` failed in a subprocess:\n{completed.stderr.strip()}")
    for line in completed.stdout.splitlines():
        if line.startswith("RESULT "):
            _, seconds, torch_loaded = line.split()
            return float(seconds), torch_loaded == "True"
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
    statements = STATEMENTS | ({} if args.no_lightning or args.quick else LIGHTNING_STATEMENT)
    available = [statement for statement, module in statements.items() if find_spec(module) is not None]
    missing = {statement: "not installed" for statement in statements if statement not in available}
    workdir = tempfile.mkdtemp(prefix="tracktrain-importtime-")
    env = dict(os.environ)
    if not args.no_pycache_prefix:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = os.path.join(workdir, "pycache")
    loads_torch: dict[str, str] = {}

    def run(statement: str) -> float:
        seconds, torch_loaded = run_child(statement, env, workdir)
        loads_torch[statement] = "yes" if torch_loaded else "no"
        return seconds * 1e3

    try:
        for statement in [] if args.quick else list(available):  # warm-up: bytecode written, OS cache filled
            try:
                run_child(statement, env, workdir)
            except RuntimeError as error:
                if statement.startswith("import tracktrain"):
                    raise
                print(f"skipping `{statement}`: {error}", file=sys.stderr)
                missing[statement] = "import fails"
                available.remove(statement)
        samples = h.measure(available, args.repeats, random.Random(args.seed), run, warmup=False)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    bytecode = "as the environment has it" if args.no_pycache_prefix else "warm, in a private PYTHONPYCACHEPREFIX"
    print(f"# Import time (fresh interpreter per run)\n\npython {sys.version.split()[0]}; bytecode {bytecode}")
    rows = h.compare("import", samples, (BASELINE, PEER), "ms", args.stat, loads_torch=loads_torch)
    h.report(rows, "loads_torch", decimals=1)
    print(f"value: time spent in the import statement only. Not run: {missing or 'none'}.")
    return h.finish(args, {"python": sys.version.split()[0], "arguments": vars(args), "rows": rows}, [])


if __name__ == "__main__":
    sys.exit(main())
