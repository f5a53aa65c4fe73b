#!/usr/bin/env python
"""What per-step fault tolerance costs: the time per optimizer step of the same fit with `strategy="ft_ddp"` (2
torchft replica groups of one process each, a lighthouse, gloo) next to `strategy="ddp"` (2 gloo processes), and
the time from a replica group's process start to its first step with a group already running (it joins, is healed
from that peer, steps with it) next to a plain one-process fit's start to its first step, both beside that running
group.

Each fit is new processes (`ft_fits.py`), launched alike for both strategies; the rounds interleave the variants in
an order shuffled per round. A step-time sample is one fit's time per step from the end of its `--warmup`-th step
to its last (process 0's / group 0's clock). A join sample is the joining process's first step end minus the
moment the parent started it (one wall clock). See benchmarks/README.md.

    .venv/bin/python benchmarks/bench_ft_ddp.py --quick      # smoke test, ~30 s
    .venv/bin/python benchmarks/bench_ft_ddp.py              # the real run, ~3 min on 2 cores

Timing never makes this script fail; it exits with status 1 when a fit took the wrong number of steps, the two
processes of a fit ended on different weights, ft_ddp's weights differ from ddp's (rtol 1e-5), or a joining group
did not step with the running one (2 participants, at the running group's step).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import harness as h
import torch

HERE = Path(__file__).resolve().parent
WORKER = HERE / "ft_fits.py"
LIGHTHOUSE = Path(sys.executable).with_name("torchft_lighthouse")
DDP, FT_DDP, JOIN, PLAIN = "ddp", "ft_ddp", "ft_ddp join", "plain start"
TIMEOUT = 180.0  # no process of a fit waits longer: it is killed, and the fit is a problem


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Processes:
    """The processes of one fit (and its lighthouse), each stopped by its PID when the fit is over."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: list[subprocess.Popen] = []

    def start(self, command: list[str], env: dict[str, str], log: str) -> subprocess.Popen:
        process = subprocess.Popen(
            command,
            env={**os.environ, **env},
            cwd=HERE.parent,
            stdout=(self.root / log).open("w"),
            stderr=subprocess.STDOUT,
        )
        self.started.append(process)
        return process

    def worker(self, strategy: str, steps: int, out: str, env: dict[str, str], *options: str) -> subprocess.Popen:
        command = [sys.executable, str(WORKER), strategy, str(steps), str(self.root / out), *options]
        return self.start(command, env, f"{out}.log")

    def lighthouse(self, min_replicas: int) -> str:
        port = free_port()
        self.start(
            [str(LIGHTHOUSE), "--bind", f"127.0.0.1:{port}", "--min_replicas", str(min_replicas)]
            + ["--join_timeout_ms", "200", "--heartbeat_timeout_ms", "1000"],
            {},
            "lighthouse.log",
        )
        deadline = time.monotonic() + 30
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            if time.monotonic() > deadline:
                raise TimeoutError("the torchft lighthouse did not start within 30 s")
            time.sleep(0.05)
        return f"http://127.0.0.1:{port}"

    def wait(self, processes: list[subprocess.Popen], where: str, problems: list[str]) -> bool:
        deadline = time.monotonic() + TIMEOUT
        for process in processes:
            try:
                code = process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                problems.append(f"{where}: a process ran past {TIMEOUT:g} s (see {self.root})")
                return False
            if code != 0:
                problems.append(f"{where}: a process exited with status {code} (see {self.root})")
                return False
        return True

    def stop(self) -> None:
        for process in reversed(self.started):
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(10)
        self.started = []


def read(root: Path, name: str) -> dict[str, Any]:
    return json.loads((root / name).read_text())


def step_fit(strategy: str, args: Any, root: Path, problems: list[str], weights: dict[str, list[float]]) -> float:
    """One fit of 2 processes; rank 0's / group 0's ms per step after the warm-up steps."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    processes = Processes(root)
    threads = ["--threads", str(args.threads)]
    try:
        if strategy == DDP:
            port = str(free_port())
            for rank in (0, 1):
                env = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
                processes.worker(DDP, args.steps, f"p{rank}.json", {**env, "MASTER_PORT": port}, *threads)
        else:  # both groups step together from the first step: the lighthouse waits for both
            address = processes.lighthouse(min_replicas=2)
            for group in (0, 1):
                env = {"TORCHFT_LIGHTHOUSE": address, "TRACKTRAIN_FT_GROUP": str(group), "TRACKTRAIN_FT_GROUPS": "2"}
                processes.worker(FT_DDP, args.steps, f"p{group}.json", env, *threads)
        if not processes.wait(list(processes.started[-2:]), f"[{strategy}]", problems):
            return float("nan")
    finally:
        processes.stop()
    results = [read(root, f"p{index}.json") for index in (0, 1)]
    for index, result in enumerate(results):
        if result["global_step"] != args.steps or len(result["ends"]) != args.steps:
            problems.append(f"[{strategy}] process {index} took {result['global_step']} steps, not {args.steps}")
    if results[0]["weights"] != results[1]["weights"]:
        problems.append(f"[{strategy}] the two processes ended with different weights")
    reference = weights.setdefault(DDP if strategy == DDP else FT_DDP, results[0]["weights"])
    if reference != results[0]["weights"]:
        problems.append(f"[{strategy}] a fit ended with other weights than the first fit of the same strategy")
    ends = results[0]["ends"]
    return 1000 * (ends[-1] - ends[args.warmup - 1]) / (len(ends) - args.warmup)


def join_sample(variant: str, args: Any, root: Path, problems: list[str]) -> float:
    """Seconds from a process's start to its first step's end, beside a running replica group (group 0, stepping
    every `--running-sleep` s): a group that joins it (JOIN), or a plain one-process fit (PLAIN)."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    processes = Processes(root)
    try:
        address = processes.lighthouse(min_replicas=1)
        group = {"TORCHFT_LIGHTHOUSE": address, "TRACKTRAIN_FT_GROUPS": "2"}
        threads = ["--threads", str(args.threads)]
        running = processes.worker(
            FT_DDP,
            10**9,
            "running.json",
            {**group, "TRACKTRAIN_FT_GROUP": "0"},
            "--sleep",
            str(args.running_sleep),
            *threads,
        )
        log = root / "running.json.log"
        deadline = time.monotonic() + TIMEOUT
        while "should_commit=true" not in log.read_text():  # it steps (torchft logs each commit)
            if running.poll() is not None or time.monotonic() > deadline:
                problems.append(f"[{variant}] the running group did not start stepping (see {root})")
                return float("nan")
            time.sleep(0.05)
        time.sleep(0.5)  # well under way
        started = time.time()
        if variant == JOIN:
            joining = processes.worker(
                FT_DDP, 10**9, "joining.json", {**group, "TRACKTRAIN_FT_GROUP": "1"}, "--first-step-only", *threads
            )
        else:
            joining = processes.worker("single", 10**9, "joining.json", {}, "--first-step-only", *threads)
        if not processes.wait([joining], f"[{variant}]", problems):
            return float("nan")
    finally:
        processes.stop()
    result = read(root, "joining.json")
    if variant == JOIN and (result["participants"] != 2 or result["first_step"] < 2):
        problems.append(
            f"[{variant}] the joining group's first step was step {result['first_step']} with "
            f"{result['participants']} participant(s): not healed to the running group's step, with it"
        )
    return result["first_step_wall"] - started


def main(argv: list[str] | None = None) -> int:
    args = h.parse(
        __doc__,
        argv,
        {
            "steps": (300, 30, "optimizer steps per step-time fit"),
            "warmup": (50, 10, "steps of each step-time fit not timed (quorum and process-group set-up)"),
            "repeats": (5, 1, "step-time fits per strategy"),
            "join_repeats": (5, 1, "joins (and plain starts) measured"),
        },
        options=lambda add: add(
            "--running-sleep", type=float, default=0.02, help="seconds the running group sleeps per step (0.02)"
        ),
        positive=["steps", "repeats", "join_repeats", "threads"],
        lightning=False,
        root_dir="the fits' result files and logs",
    )
    if args.warmup < 1 or args.warmup >= args.steps:
        print(f"--warmup must be in 1 … --steps - 1, got {args.warmup}", file=sys.stderr)
        return 2
    try:
        import torchft
    except ImportError:
        print("bench_ft_ddp needs torchft: pip install 'tracktrain[ft]'", file=sys.stderr)
        return 2
    rng = h.prepare(args)
    env = h.start(
        'strategy="ft_ddp" (torchft, 2 replica groups of 1 process) vs strategy="ddp" (2 processes), gloo',
        args,
        f"{args.repeats} interleaved step-time fits per strategy, {args.join_repeats} joins",
        torchft=getattr(torchft, "__version__", "0.2.0"),
    )
    root = Path(h.temporary_root("bench-ft-", args.root_dir))
    problems: list[str] = []
    weights: dict[str, list[float]] = {}
    steps = h.measure(
        [DDP, FT_DDP], args.repeats, rng, lambda s: step_fit(s, args, root / s, problems, weights), warmup=False
    )
    ddp_w, ft_w = weights.get(DDP), weights.get(FT_DDP)
    if ddp_w and ft_w and not torch.allclose(torch.tensor(ft_w), torch.tensor(ddp_w), rtol=1e-5, atol=1e-7):
        problems.append("ft_ddp's trained weights differ from ddp's (rtol 1e-5)")
    joins = h.measure(
        [JOIN, PLAIN], args.join_repeats, rng, lambda v: join_sample(v, args, root / "join", problems), warmup=False
    )
    timed = args.steps - args.warmup
    rows = h.compare(
        f"time per step, MLP {'-'.join(map(str, (256, 512, 512, 10)))}, batch 64, {timed} steps/sample",
        steps,
        DDP,
        "ms/step",
        args.stat,
    )
    rows += h.compare(
        f"a process's start to its first step, beside a running group (sleeping {args.running_sleep:g} s/step)",
        joins,
        PLAIN,
        "s",
        args.stat,
    )
    print(h.command_line() + "\n")
    h.report(rows, decimals=3)
    return h.finish(args, {"environment": env, "rows": rows}, problems)


if __name__ == "__main__":
    sys.exit(main())
