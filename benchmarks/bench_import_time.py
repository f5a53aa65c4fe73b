#!/usr/bin/env python
"""Import time of tracktrain next to torch, PyTorch-Ignite and Lightning, each in a fresh interpreter.

Each statement runs in its own `python -c` subprocess that times only the import (interpreter start-up is
reported apart, as the whole process's wall time). Statements are interleaved and shuffled per repeat after
one warm-up run each; the table shows medians.

    .venv/bin/python benchmarks/bench_import_time.py --quick
    .venv/bin/python benchmarks/bench_import_time.py --repeats 7 --json /tmp/import_time.json

Bytecode: the children write and read their .pyc files under a private temporary PYTHONPYCACHEPREFIX (and
PYTHONDONTWRITEBYTECODE is dropped for them), so every package is measured with warm bytecode, including an
editable tracktrain whose source tree may have no __pycache__, and no file outside the temporary folder is
written. Pass --no-pycache-prefix to use the environment as it is.
"""

from __future__ import annotations

import argparse
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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per statement (default 7; --quick 3)")
    parser.add_argument("--quick", action="store_true", help="3 repeats: a smoke test")
    parser.add_argument("--no-lightning", action="store_true", help="leave `import lightning.pytorch` out (slow)")
    parser.add_argument(
        "--no-pycache-prefix", action="store_true", help="do not redirect bytecode to a temporary folder"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the shuffled orders")
    parser.add_argument("--json", metavar="PATH", help="also write all results (with every sample) to PATH")
    args = parser.parse_args(argv)
    if args.repeats is None:
        args.repeats = 3 if args.quick else 7
    if args.repeats < 1:
        parser.error("--repeats must be positive")
    return args


def ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:,.1f}"


def ratio(value: float, reference: float | None) -> str:
    return "—" if not reference else f"{value / reference:.3f}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    statements = list(STATEMENTS)
    if not args.no_lightning:
        statements.append(LIGHTNING_STATEMENT)
    available: list[tuple[str, str]] = []
    missing: list[tuple[str, str]] = []  # (label, why)
    for label, statement, module in statements:
        try:
            found = find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if found:
            available.append((label, statement))
        else:
            missing.append((label, "not installed"))

    workdir = tempfile.mkdtemp(prefix="tracktrain-importtime-")
    env = dict(os.environ)
    if not args.no_pycache_prefix:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = os.path.join(workdir, "pycache")
    rng = random.Random(args.seed)
    samples: dict[str, list[float]] = {label: [] for label, _ in available}
    walls: dict[str, list[float]] = {label: [] for label, _ in available}
    loads_torch: dict[str, bool] = {}
    try:
        for label, statement in list(available):  # warm-up: bytecode written, files in the OS cache
            try:
                run_child(statement, env, workdir)
            except RuntimeError as error:
                if label.startswith("import tracktrain"):
                    raise
                print(f"skipping `{label}`: {error}", file=sys.stderr)
                available.remove((label, statement))
                missing.append((label, "import fails"))
        samples = {label: samples[label] for label, _ in available}
        walls = {label: walls[label] for label, _ in available}
        for _, (label, statement) in h.interleaved(available, args.repeats, rng):
            seconds, torch_loaded, wall = run_child(statement, env, workdir)
            samples[label].append(seconds)
            walls[label].append(wall)
            loads_torch[label] = torch_loaded
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    medians = {label: statistics.median(values) for label, values in samples.items()}
    baseline, peer = medians.get(BASELINE), medians.get(PEER)
    print("# Import time (fresh interpreter per run)\n")
    bytecode = "as the environment has it" if args.no_pycache_prefix else "warm, in a private PYTHONPYCACHEPREFIX"
    print(
        f"python {sys.version.split()[0]} ({sys.executable}); {args.repeats} interleaved repeats after a warm-up; "
        f"bytecode {bytecode}\n"
    )
    lines = [
        [
            "statement",
            "median ms",
            "min ms",
            "max ms",
            "process wall ms (median)",
            "loads torch",
            "× import torch",
            "× import ignite.engine",
        ]
    ]
    for label, _ in available:
        values = samples[label]
        lines.append(
            [
                f"`{label}`",
                ms(medians[label]),
                ms(min(values)),
                ms(max(values)),
                ms(statistics.median(walls[label])),
                "yes" if loads_torch[label] else "no",
                ratio(medians[label], baseline),
                ratio(medians[label], peer),
            ]
        )
    lines += [[f"`{label}`", why] + [""] * 6 for label, why in missing]
    print(h.markdown_table(lines, "lrrrrlrr"))
    print(
        "\nmedian/min/max ms: time spent in the import statement only. process wall: the whole `python -c` run, "
        "interpreter start-up and exit included. × columns: median / the median of that reference row."
    )

    return h.finish(
        args,
        {
            "python": sys.version.split()[0],
            "arguments": vars(args),
            "results": [
                {
                    "statement": label,
                    "median_s": medians[label],
                    "samples_s": samples[label],
                    "process_wall_s": walls[label],
                    "loads_torch": loads_torch[label],
                }
                for label, _ in available
            ],
            "missing": dict(missing),
        },
        [],
    )


if __name__ == "__main__":
    sys.exit(main())
