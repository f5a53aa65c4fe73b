"""Run one of Ignite's example programs (a script with its folder, or a notebook's code) twice, under Ignite and with
`ignite.` changed to `tracktrain.` only, and compare what the two runs did: every event each Engine fired, in
order, and the metrics at each COMPLETED and EPOCH_COMPLETED (issue 48).

    .venv/bin/python scripts/ignite_port/port.py EXAMPLE --work /tmp/ignite-ports/NAME [--samples N] [-- ARGS...]

EXAMPLE is a .py file (its folder is copied, for its own modules) or an .ipynb (its code cells, without the `!`
and `%` lines, become main.py). `--then` in ARGS starts the arguments of a second run of the program in the same
folder (a resume after a crash), `{dir}` in them is that folder. IGNITE_PORT_PATH adds folders to both runs' path
(packages an example needs that the project does not, e.g. pynvml for Ignite's GpuInfo). Each copy runs outside the repository, in WORK/ignite and WORK/tracktrain, with
`stand_ins/` on PYTHONPATH: a torchvision stand-in of synthetic data of the real shapes (IGNITE_PORT_SAMPLES images per
training set) and the recorder (`stand_ins/sitecustomize.py`). Prints one line: the result, the events compared, the
largest metric difference, and each run's time; exits 1 when the runs differ.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

SITE = Path(__file__).resolve().parent / "stand_ins"
_IMPORT = re.compile(r"\bignite\.|\bimport ignite\b|\bfrom ignite\b")


def tracktrain_source(text: str) -> str:
    """`text` with `ignite.` changed to `tracktrain.` (and `import ignite` / `from ignite` to tracktrain's)."""
    return _IMPORT.sub(lambda m: m.group(0).replace("ignite", "tracktrain"), text)


def notebook_code(path: Path) -> str:
    """The notebook's code cells as one script; `!` and `%` lines commented out, and the `display` a notebook's
    runtime gives its code (the IPython stand-in of `stand_ins/` prints)."""
    cells = json.loads(path.read_text())["cells"]
    lines = ["from IPython.display import display  # the notebook runtime's", ""]
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        for line in "".join(cell["source"]).splitlines():
            lines.append("# " + line if line.lstrip().startswith(("!", "%")) else line)
        lines.append("")
    return "\n".join(lines)


def prepare(example: Path, folder: Path, lib: str) -> str:
    """Copy the program into `folder` (rewritten for tracktrain when lib is "tracktrain"); its main file's name."""
    if folder.exists():
        shutil.rmtree(folder)
    if example.suffix == ".ipynb":
        folder.mkdir(parents=True)
        main = "main.py"
        (folder / main).write_text(notebook_code(example))
    else:
        shutil.copytree(example.parent, folder, ignore=shutil.ignore_patterns("*.png", "*.jpg", "__pycache__"))
        main = example.name
    if lib == "tracktrain":
        for path in folder.rglob("*.py"):
            path.write_text(tracktrain_source(path.read_text()))
    return main


def run(
    example: Path, work: Path, lib: str, runs: list[list[str]], samples: int, timeout: float
) -> tuple[int, float, str]:
    folder = work / lib
    main = prepare(example, folder, lib)
    record = work / f"{lib}.jsonl"
    for old in work.glob(f"{lib}.jsonl*"):
        old.unlink()
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join([str(SITE), str(folder), *os.environ.get("IGNITE_PORT_PATH", "").split(os.pathsep)]),
        IGNITE_PORT_LIB=lib,
        IGNITE_PORT_RECORD=str(record),
        IGNITE_PORT_SAMPLES=str(samples),
        MPLBACKEND="Agg",
        WANDB_MODE="offline",
        WANDB_SILENT="true",
    )
    started = time.monotonic()
    log = []
    for args in runs:
        command = [sys.executable, main, *(arg.replace("{dir}", str(folder)) for arg in args)]
        done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)
        log.append(f"$ {' '.join(command)}\n{done.stdout}\n--- stderr ---\n{done.stderr}")
        if done.returncode != 0:
            break
    (work / f"{lib}.log").write_text("\n".join(log))
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    return done.returncode, time.monotonic() - started, last


def records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _numbers(value) -> list[float]:
    if isinstance(value, dict):
        return [n for key in sorted(value) for n in _numbers(value[key])]
    if isinstance(value, list):
        return [n for item in value for n in _numbers(item)]
    return [value] if isinstance(value, float) else []


def compare(ignite: list[dict], ours: list[dict], rel: float, skip: set[str]) -> tuple[str, float]:
    """'' when the runs did the same (else what differs first) and the largest relative metric difference; the
    metrics named in `skip` (a known, deliberate difference) are left out of it."""
    worst = 0.0
    for i, (a, b) in enumerate(zip(ignite, ours)):
        key_a = (a["engine"], a["event"], a["epoch"], a["iteration"])
        key_b = (b["engine"], b["event"], b["epoch"], b["iteration"])
        if key_a != key_b:
            return f"event {i}: Ignite {key_a}, tracktrain {key_b}", worst
        if "metrics" in a:
            if sorted(a["metrics"]) != sorted(b["metrics"]):
                return f"event {i} {key_a}: metrics {sorted(a['metrics'])} vs {sorted(b['metrics'])}", worst
            for name in sorted(set(a["metrics"]) - skip):
                x, y = _numbers(a["metrics"][name]), _numbers(b["metrics"][name])
                if len(x) != len(y):
                    return f"event {i} {key_a}: {name} {a['metrics'][name]!r} vs {b['metrics'][name]!r}", worst
                for u, v in zip(x, y):
                    if math.isnan(u) and math.isnan(v):
                        continue
                    difference = abs(u - v) / max(abs(u), 1e-12) if abs(u - v) > 1e-7 else 0.0
                    worst = max(worst, difference)
                    if difference > rel:
                        return f"event {i} {key_a}: {name} = {u!r} (Ignite) vs {v!r}", worst
    if len(ignite) != len(ours):
        return f"Ignite fired {len(ignite)} events, tracktrain {len(ours)}", worst
    return "", worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("example", type=Path)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--rel", type=float, default=1e-5, help="largest relative difference of a metric")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--skip-metric", action="append", default=[], help="a metric that differs on purpose")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    options, args = parser.parse_args(argv[:split]), argv[split + 1 :]
    options.work.mkdir(parents=True, exist_ok=True)
    runs: list[list[str]] = [[]]
    for arg in args:
        if arg == "--then":
            runs.append([])
        else:
            runs[-1].append(arg)
    results = {
        lib: run(options.example.resolve(), options.work, lib, runs, options.samples, options.timeout)
        for lib in ("ignite", "tracktrain")
    }
    (ignite_rc, ignite_s, ignite_err), (ours_rc, ours_s, ours_err) = results["ignite"], results["tracktrain"]
    # one record per process: the script's, and each rank's of a distributed run (compared rank by rank)
    files = sorted(path.name.removeprefix("ignite") for path in options.work.glob("ignite.jsonl*"))
    ignite_rows, our_rows, difference, worst = [], [], "", 0.0
    for suffix in files:
        theirs, ours = records(options.work / f"ignite{suffix}"), records(options.work / f"tracktrain{suffix}")
        found, largest = compare(theirs, ours, options.rel, set(options.skip_metric))
        ignite_rows += theirs
        our_rows += ours
        worst = max(worst, largest)
        difference = difference or (f"{suffix}: {found}" if found else "")
    if ignite_rc != 0:
        verdict = f"FAILS UNDER IGNITE (exit {ignite_rc}: {ignite_err})"
    elif ours_rc != 0:
        verdict = f"FAILS ON TRACKTRAIN (exit {ours_rc}: {ours_err})"
    elif difference:
        verdict = f"DIFFERS: {difference}"
    else:
        verdict = "SAME" + (f" (but {', '.join(options.skip_metric)}: not compared)" if options.skip_metric else "")
    print(
        f"{options.example.name}: {verdict} | {len(ignite_rows)} events, metrics within {worst:.1e} | "
        f"Ignite {ignite_s:.1f} s, tracktrain {ours_s:.1f} s"
    )
    return 0 if verdict.startswith("SAME") else 1


if __name__ == "__main__":
    sys.exit(main())
