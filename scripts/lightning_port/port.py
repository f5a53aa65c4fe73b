"""Run a Lightning program twice, under Lightning 2.6 and ported to tracktrain with the renames of
`docs/migration/lightning.md` only, and compare the loss of every training step the two runs took (issue 46).

    .venv/bin/python scripts/lightning_port/port.py PROGRAM --work /tmp/lightning-ports/NAME [--samples N] [-- ARGS...]
    .venv/bin/python scripts/lightning_port/port.py --list scripts/lightning_port/programs.toml --sources DIR --work DIR

PROGRAM is a .py file (its folder is copied, for its own modules; a Lightning tutorial's jupytext `# %%` file runs as
it is) or an .ipynb (its code cells, without the `!` and `%` lines, become main.py). `--list` runs every program of a
TOML list (`[[program]]` tables with `name`, `source`, `path` under `--sources/<source>`, `args`, `samples`,
`trainer`: Trainer arguments set in both runs to shorten a long one, `note`; or `driver`, a file of `drivers/` that
runs a source's module and datamodule, with `extra`, the source's folders copied beside it), one line each; a .md PROGRAM runs its
first python block (a README's example).
Each copy runs outside the repository, in WORK/lightning and WORK/tracktrain, with `stand_ins/` on PYTHONPATH, then
`scripts/ignite_port/stand_ins` (torchvision of synthetic data of the real shapes: LIGHTNING_PORT_SAMPLES images per
training set, nothing downloaded; IPython's `display`), and the recorder (`stand_ins/sitecustomize.py`: it seeds
torch, random and numpy with 0 at start-up and records each training step's loss and a fingerprint of its batch).
Prints one line: the result, the steps compared, the largest relative loss difference while the two runs read the
same batches (and where their data order parted: a shuffling loader's order is drawn from the run's seed here, not
from torch's global generator), and each run's time; exits 1 when the port fails or its losses differ.

The rewriting (`ported_source`) changes only: the imports of `lightning` / `lightning.pytorch` / `pytorch_lightning`
(their `callbacks`, `loggers`, `utilities`, `cli`, `tuner` modules to tracktrain's of the same names) and the names
`LightningModule` -> `LoopModule`, `LightningDataModule` -> `DataModule`, `training_step` -> `train_step`,
`validation_step` -> `eval_step`.
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
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
SITE = [HERE / "stand_ins", HERE.parent / "ignite_port" / "stand_ins"]

# module paths, longest first: Lightning's -> tracktrain's
_MODULES = [
    (r"(?:lightning\.pytorch|pytorch_lightning)\.(callbacks|loggers|utilities|cli|tuner)", r"tracktrain.\1"),
    (r"lightning\.pytorch|pytorch_lightning|lightning", "tracktrain"),
]
_NAMES = {
    "LightningModule": "LoopModule",
    "LightningDataModule": "DataModule",
    "training_step": "train_step",
    "validation_step": "eval_step",
}
_IMPORT_LINE = re.compile(r"^(\s*)(from|import)\s+(.*)$")


def _port_modules(text: str) -> str:
    for pattern, replacement in _MODULES:
        text = re.sub(rf"(?<![\w.]){pattern}(?![\w])", replacement, text)
    return text


def ported_source(text: str) -> str:
    """`text` with Lightning's imports changed to tracktrain's and the documented renames made (nothing else):
    a name of the program's own that is one of ours (imagenet.py's `eval_step` helper) becomes `shared_<name>`."""
    lines = []
    for line in text.splitlines(keepends=True):
        match = _IMPORT_LINE.match(line)
        if match or re.search(r"(?<![\w.])(lightning\.pytorch|pytorch_lightning)\.", line):
            line = _port_modules(line)
        lines.append(line)
    ported = "".join(lines)
    for ours in ("train_step", "eval_step"):  # a method of the program's own with our name: renamed first
        ported = re.sub(rf"\b{ours}\b", f"shared_{ours}", ported)
    return re.sub(r"\b(" + "|".join(_NAMES) + r")\b", lambda m: _NAMES[m.group(1)], ported)


def notebook_code(path: Path) -> str:
    """The notebook's code cells as one script, its `!` and `%` lines commented out."""
    cells = json.loads(path.read_text())["cells"]
    lines = ["from IPython.display import display  # the notebook runtime's", ""]
    for cell in cells:
        if cell["cell_type"] == "code":
            for line in "".join(cell["source"]).splitlines():
                lines.append("# " + line if line.lstrip().startswith(("!", "%")) else line)
            lines.append("")
    return "\n".join(lines)


def markdown_code(path: Path) -> str:
    """The first ```python block of a markdown file (a README's example)."""
    match = re.search(r"^```python\n(.*?)^```", path.read_text(), re.MULTILINE | re.DOTALL)
    if match is None:
        raise ValueError(f"{path} has no ```python block")
    return match.group(1)


def prepare(program: Path, folder: Path, lib: str, extra: list[Path]) -> str:
    """Copy the program into `folder` (with the `extra` folders of its source: a driver's package), ported when lib
    is "tracktrain"; its main file's name."""
    if folder.exists():
        shutil.rmtree(folder)
    if program.suffix in (".ipynb", ".md"):
        folder.mkdir(parents=True)
        main = "main.py"
        (folder / main).write_text(notebook_code(program) if program.suffix == ".ipynb" else markdown_code(program))
    else:
        ignore = shutil.ignore_patterns("*.png", "*.jpg", "*.gif", "__pycache__", "*.ipynb")
        shutil.copytree(program.parent, folder, ignore=ignore)
        main = program.name
        for path in extra:
            shutil.copytree(path, folder / path.name, ignore=ignore)
        text = (folder / main).read_text()
        lines = [("# " + line if line.lstrip().startswith(("! ", "!pip", "%")) else line) for line in text.splitlines()]
        (folder / main).write_text("\n".join(lines) + "\n")
    if lib == "tracktrain":
        for path in folder.rglob("*.py"):
            path.write_text(ported_source(path.read_text()))
    return main


def run(
    program: Path, work: Path, lib: str, args: list[str], samples: int, timeout: float, trainer: dict, extra: list[Path]
) -> tuple[int, float, str]:
    folder = work / lib
    main = prepare(program, folder, lib, extra)
    record = work / f"{lib}.jsonl"
    record.unlink(missing_ok=True)
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join([*map(str, SITE), str(folder)]),
        LIGHTNING_PORT_LIB=lib,
        LIGHTNING_PORT_RECORD=str(record),
        LIGHTNING_PORT_SAMPLES=str(samples),
        IGNITE_PORT_SAMPLES=str(samples),
        MPLBACKEND="Agg",
        PATH_DATASETS=str(folder / "data"),
        PATH_CHECKPOINT=str(folder / "checkpoints"),
        WANDB_MODE="offline",
        CUDA_VISIBLE_DEVICES="",
        LIGHTNING_PORT_TRAINER=json.dumps(trainer),
    )
    started = time.monotonic()
    command = [sys.executable, main, *(arg.replace("{dir}", str(folder)) for arg in args)]
    try:
        done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, time.monotonic() - started, f"timed out after {timeout:.0f} s"
    (work / f"{lib}.log").write_text(f"$ {' '.join(command)}\n{done.stdout}\n--- stderr ---\n{done.stderr}")
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    return done.returncode, time.monotonic() - started, last


def records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def compare(theirs: list[dict], ours: list[dict], rel: float) -> tuple[str, float, int | None]:
    """'' when the losses agree while the batches do (else what differs), the largest relative difference, and the
    first step whose batch differs (None when every compared step read the same batch)."""
    worst, parted = 0.0, None
    for i, (a, b) in enumerate(zip(theirs, ours)):
        if a["batch"] != b["batch"]:
            parted = i
            break
        x, y = a["loss"], b["loss"]
        if x is None or y is None or (math.isnan(x) and math.isnan(y)):
            continue
        difference = abs(x - y) / max(abs(x), 1e-12) if abs(x - y) > 1e-8 else 0.0
        worst = max(worst, difference)
        if difference > rel:
            return f"step {i}: loss {x!r} (Lightning) vs {y!r}", worst, parted
    if len(theirs) != len(ours):
        return f"Lightning took {len(theirs)} steps, tracktrain {len(ours)}", worst, parted
    return "", worst, parted


def port(
    program: Path,
    work: Path,
    args: list[str],
    samples: int,
    rel: float,
    timeout: float,
    trainer: dict | None = None,
    extra: list[Path] | None = None,
) -> tuple[str, bool]:
    """Run `program` both ways in `work` (`trainer`: Trainer arguments the recorder sets in both runs, e.g. a
    `max_steps` that shortens a program training for hours); the line to print and whether the port did as
    Lightning did."""
    work.mkdir(parents=True, exist_ok=True)
    results = {
        lib: run(program.resolve(), work, lib, args, samples, timeout, trainer or {}, extra or [])
        for lib in ("lightning", "tracktrain")
    }
    (theirs_rc, theirs_s, theirs_err), (ours_rc, ours_s, ours_err) = results["lightning"], results["tracktrain"]
    theirs, ours = records(work / "lightning.jsonl"), records(work / "tracktrain.jsonl")
    found, worst, parted = compare(theirs, ours, rel)
    if theirs_rc != 0:
        verdict = f"FAILS UNDER LIGHTNING (exit {theirs_rc}: {theirs_err})"
    elif ours_rc != 0:
        verdict = f"FAILS ON TRACKTRAIN (exit {ours_rc}: {ours_err})"
    elif found:
        verdict = f"DIFFERS: {found}"
    elif not theirs:
        verdict = "RUNS (no training step recorded)"
    else:
        verdict = "SAME"
    order = "" if parted is None else f", data order parts at step {parted}"
    line = (
        f"{program.name}: {verdict} | {min(len(theirs), len(ours))} of {len(theirs)} steps compared, losses within "
        f"{worst:.1e}{order} | "
        f"Lightning {theirs_s:.1f} s, tracktrain {ours_s:.1f} s"
    )
    return line, verdict.startswith(("SAME", "RUNS"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("program", type=Path, nargs="?")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--list", type=Path, help="a TOML list of programs ([[program]] source, path, args)")
    parser.add_argument("--sources", type=Path, help="with --list: the folder holding each source's checkout")
    parser.add_argument("--only", action="append", default=[], help="with --list: run the programs of these names")
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--rel", type=float, default=1e-4, help="largest relative difference of a step's loss")
    parser.add_argument("--timeout", type=float, default=600)
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    options, args = parser.parse_args(argv[:split]), argv[split + 1 :]
    if options.list is None:
        if options.program is None:
            parser.error("give a PROGRAM or --list")
        line, ok = port(options.program, options.work, args, options.samples, options.rel, options.timeout)
        print(line, flush=True)
        return 0 if ok else 1
    if options.sources is None:
        parser.error("--list needs --sources")
    programs = tomllib.loads(options.list.read_text())["program"]
    failed = 0
    for entry in programs:
        if options.only and entry["name"] not in options.only:
            continue
        source = options.sources / entry["source"]
        program = HERE / entry["driver"] if "driver" in entry else source / entry["path"]
        samples = entry.get("samples", options.samples)
        line, ok = port(
            program,
            options.work / entry["name"],
            entry.get("args", []),
            samples,
            options.rel,
            options.timeout,
            entry.get("trainer"),
            [source / path for path in entry.get("extra", [])],
        )
        print(f"{entry['name']} ({entry['source']}) {line}", flush=True)
        failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
