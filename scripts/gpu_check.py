"""The GPU check (scripts/gpu-check.sh runs it): on the machine's own torch, in one go, everything worth knowing
about tracktrain on a CUDA device, each part with its own time limit, so one that fails or hangs costs only its
share and the others still report:

1. where it ran: Python, torch, CUDA, the card, the driver (nvidia-smi), and that every tracktrain package imports;
2. the tests marked `cuda` (every test file that uses the marker), with pytest's JUnit report;
3. benchmarks/bench_gpu.py: the Trainer's step next to a hand-written loop and Lightning's, the checkpoint stall of
   an async save next to a blocking one, peak memory.

It writes `gpu-check.json` (everything, with each part's output) and `gpu-check.md` (the tables) into `--out`, and
prints the Markdown. `--dry-run` runs every part on the CPU with tiny counts (the `cuda` tests collect and skip),
so the script is exercised by the default test run between GPU windows. Exit status 1 when a part failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# every tracktrain package a user imports; the integrations that need MLflow/W&B/Ray are left out (not on the image)
PACKAGES = [
    "tracktrain",
    "tracktrain.engine",
    "tracktrain.handlers",
    "tracktrain.metrics",
    "tracktrain.trainer",
    "tracktrain.trainer.strategies",
    "tracktrain.callbacks",
    "tracktrain.loggers",
    "tracktrain.storage",
    "tracktrain.tuning",
    "tracktrain.export",
]

# (full, dry run) time limits in seconds; the full ones add up to under 6 minutes with the start-up
LIMITS = {"tests": (220, 120), "bench": (200, 120)}


def run_part(name: str, command: list[str], limit: int, log_dir: Path) -> dict[str, Any]:
    """Runs `command` with a deadline; its output goes to `<log_dir>/<name>.log` and is echoed as it comes, so the
    caller's log shows progress even if the whole check is cut short."""
    print(f"\n=== {name}: {' '.join(command)} (limit {limit} s)", flush=True)
    log_path = log_dir / f"{name}.log"
    start = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert process.stdout is not None
        deadline = start + limit
        timed_out = False
        for line in process.stdout:  # the pipe closes when the process (and children holding it) exits
            log.write(line)
            sys.stdout.write(line)
            sys.stdout.flush()
            if time.perf_counter() > deadline:
                timed_out = True
                break
        try:
            returncode = process.wait(timeout=max(1.0, deadline - time.perf_counter()))
        except subprocess.TimeoutExpired:
            timed_out = True
        if timed_out:
            process.kill()
            returncode = process.wait()
    seconds = time.perf_counter() - start
    status = "timed out" if timed_out else "passed" if returncode == 0 else "failed"
    print(f"=== {name}: {status} in {seconds:.0f} s", flush=True)
    text = log_path.read_text(encoding="utf-8", errors="replace")
    return {"status": status, "returncode": returncode, "seconds": round(seconds, 1), "output_tail": text[-4000:]}


def environment() -> dict[str, Any]:
    """Where it ran, and whether each tracktrain package imports on this torch."""
    import torch

    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU only",
        "cpu_count": os.cpu_count(),
    }
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
        result = subprocess.run(query, capture_output=True, text=True, timeout=30)
        info["nvidia_smi"] = (result.stdout or result.stderr).strip()
    imports = {}
    for package in PACKAGES:
        try:
            __import__(package)
            imports[package] = "ok"
        except Exception as error:  # report every package's failure, not just the first
            imports[package] = f"{type(error).__name__}: {error}"
    info["imports"] = imports
    return info


def cuda_test_files() -> list[str]:
    """Every test file of tests/cuda/, and every other one that uses the `cuda` marker (so a new one is picked up
    without editing this script; the whole suite is not collected there, as most of it needs MLflow, moto, ...)."""
    pattern = re.compile(r"pytest\.mark\.cuda\b")
    return sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("test_*.py")
        if path.parent.name == "cuda" or pattern.search(path.read_text(encoding="utf-8"))
    )


def junit_summary(path: Path) -> dict[str, Any]:
    """Counts and each test's outcome from pytest's JUnit XML (absent when pytest never got to write it)."""
    if not path.exists():
        return {"error": f"{path.name} was not written"}
    outcomes: dict[str, str] = {}
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        tags = {child.tag for child in case}
        outcomes[name] = next((tag for tag in ("failure", "error", "skipped") if tag in tags), "passed")
    counts = {outcome: sum(1 for value in outcomes.values() if value == outcome) for outcome in set(outcomes.values())}
    return {"counts": counts, "tests": outcomes}


def markdown(result: dict[str, Any], bench_table: str) -> str:
    env = result["environment"]
    lines = [
        "# tracktrain GPU check",
        "",
        f"{env['device']} · torch {env['torch']} · CUDA {env['cuda']} · Python {env['python']}"
        + (f" · nvidia-smi: {env['nvidia_smi']}" if env.get("nvidia_smi") else "")
        + (" · **dry run on the CPU**" if result["dry_run"] else ""),
        "",
        "| part | status | seconds | detail |",
        "|:---|:---|---:|:---|",
    ]
    failed_imports = {name: why for name, why in env["imports"].items() if why != "ok"}
    lines.append(
        f"| imports | {'failed' if failed_imports else 'passed'} | — | "
        f"{len(env['imports']) - len(failed_imports)} of {len(env['imports'])} packages"
        + "".join(f"; {name}: {why}" for name, why in failed_imports.items())
        + " |"
    )
    tests = result["parts"].get("tests", {})
    counts = tests.get("junit", {}).get("counts", {})
    lines.append(
        f"| cuda tests | {tests.get('status', 'not run')} | {tests.get('seconds', '—')} | "
        + ", ".join(f"{count} {outcome}" for outcome, count in sorted(counts.items()))
        + f" in {len(result['test_files'])} files |"
    )
    bench = result["parts"].get("bench", {})
    lines.append(f"| benchmarks | {bench.get('status', 'not run')} | {bench.get('seconds', '—')} | bench_gpu.py |")
    failing = [
        name for name, outcome in tests.get("junit", {}).get("tests", {}).items() if outcome in ("failure", "error")
    ]
    if failing:
        lines += ["", "Failing tests:", *(f"- `{name}`" for name in failing)]
    if bench_table:
        lines += ["", bench_table.replace("## ", "### ")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or "gpu-check-out", help="folder for the results")
    parser.add_argument("--dry-run", action="store_true", help="every part on the CPU with tiny counts")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    env = environment()
    print(json.dumps({key: value for key, value in env.items() if key != "imports"}, indent=1), flush=True)
    if not args.dry_run and not env["cuda_available"]:
        print("No CUDA device is visible to torch; run with --dry-run on a machine without one.", file=sys.stderr)
        return 2
    full = 0 if not args.dry_run else 1
    result: dict[str, Any] = {"dry_run": args.dry_run, "environment": env, "parts": {}}
    files = cuda_test_files()
    result["test_files"] = files
    junit = out / "cuda-tests.xml"
    # the project's addopts (xdist's -n among them) replaced: that machine may lack a plugin they name
    test_command = [sys.executable, "-m", "pytest", "-o", "addopts=", "--strict-markers", "-m", "cuda"]
    test_command += ["-p", "no:cacheprovider", "-q", "-rfEs"]
    test_command += ["--timeout", "150", f"--junitxml={junit}", *files]
    if not args.dry_run and importlib.util.find_spec("xdist") is not None:
        # one test file per worker (a file's tests share their set-up): compile and the nccl rank run beside the rest
        test_command += ["-n", "4", "--dist", "loadfile"]
    result["parts"]["tests"] = run_part("tests", test_command, LIMITS["tests"][full], out)
    result["parts"]["tests"]["junit"] = junit_summary(junit)
    bench_json, bench_md = out / "bench-gpu.json", out / "bench-gpu.md"
    bench_command = [sys.executable, "benchmarks/bench_gpu.py", "--json", str(bench_json), "--out", str(bench_md)]
    bench_command += ["--quick", "--device", "cpu"] if args.dry_run else []
    result["parts"]["bench"] = run_part("bench", bench_command, LIMITS["bench"][full], out)
    if bench_json.exists():
        result["bench"] = json.loads(bench_json.read_text(encoding="utf-8"))
    result["seconds"] = round(time.perf_counter() - started, 1)
    table = markdown(result, bench_md.read_text(encoding="utf-8") if bench_md.exists() else "")
    (out / "gpu-check.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    (out / "gpu-check.md").write_text(table, encoding="utf-8")
    print("\n" + table)
    print(f"Wrote {out / 'gpu-check.json'} and {out / 'gpu-check.md'} ({result['seconds']:.0f} s)")
    failed = [name for name, part in result["parts"].items() if part["status"] != "passed"]
    failed += [f"import {name}" for name, why in env["imports"].items() if why != "ok"]
    if args.dry_run and not result["parts"]["tests"]["junit"].get("counts"):
        failed.append("tests: no cuda test was collected")
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
