"""What the benchmark scripts share: the model, loading the peer libraries, the clock on a Trainer's train engine,
the statistics and the interleaved order of the repeats, the number format, markdown tables, the report's heading,
command and goal line, the JSON file and the exit status. (A local `mlflow server` and a free port come from
`tracktrain_integrations.testing`, which the tests use too.)

The scripts run as `python benchmarks/<script>.py`, which puts this folder first on sys.path, so they import this
module as `_common`. It imports torch and tracktrain only inside the functions that need them: the import-time
benchmark uses it too.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import platform
import random
import shlex
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from torch import nn

    from tracktrain.trainer import Trainer

T = TypeVar("T")


def make_mlp(sizes: tuple[int, ...]) -> nn.Sequential:
    """Linear layers of the given widths with ReLU between them (none after the last)."""
    from torch import nn

    layers: list[nn.Module] = []
    for index, (width_in, width_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        if index:
            layers.append(nn.ReLU())
        layers.append(nn.Linear(width_in, width_out))
    return nn.Sequential(*layers)


def silence_lightning() -> None:
    """Keeps Lightning's info logs and warnings (GPU availability, few DataLoader workers, ...) off the console,
    where they would come in every fit."""
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"lightning(\..*)?")
    warnings.filterwarnings("ignore", module=r"lightning_fabric(\..*)?")


def load_peer(name: str, *submodules: str, skip: bool = False) -> tuple[ModuleType | None, str]:
    """Imports the peer library `name` (and its `submodules`, e.g. "lightning.pytorch.callbacks") for a side-by-side
    run: (the module, its version), or (None, why it is missing) when it is left out (`skip`), not installed, or fails
    to import. Lightning's console noise is silenced when it loads."""
    if skip:
        return None, "left out"
    try:
        module = importlib.import_module(name)
        for submodule in submodules:
            importlib.import_module(submodule)
    except Exception as error:  # not installed, or an install that fails to import
        return None, f"not installed ({type(error).__name__}: {error})"
    if name.split(".")[0] == "lightning":
        silence_lightning()
    return module, str(getattr(module, "__version__", "?"))


class EngineClock:
    """Handlers on a Trainer's train engine that read the clock and the iteration when the second epoch starts,
    and the clock when the run completes. Attached before `fit`, they run before the Trainer's own handlers of each
    event, so the Trainer's work at every epoch's start and end (the loggers' epoch-end flushes included) falls
    inside the timed span, and the fit's end (loggers finalized) outside."""

    def __init__(self, trainer: Trainer) -> None:
        from tracktrain.engine import Events

        self.start = self.end = 0.0
        self.start_iteration = 0
        trainer.train_engine.add_event_handler(Events.EPOCH_STARTED, self._epoch_started)
        trainer.train_engine.add_event_handler(Events.COMPLETED, self._completed)

    def _epoch_started(self, engine: Any) -> None:
        if engine.state.epoch == 2:
            self.start = time.perf_counter()
            self.start_iteration = engine.state.iteration

    def _completed(self) -> None:
        self.end = time.perf_counter()


# ------------------------------------------------------------------------------------------------ statistics
def quartiles(values: list[float]) -> tuple[float, float]:
    """(first, third) quartile; a single value is both."""
    if len(values) < 2:
        return values[0], values[0]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q3


# --stat's choices: the figure reported for a variant, over its repeats
STATISTICS: dict[str, Callable[[list[float]], float]] = {
    "median": statistics.median,
    "p25": lambda values: quartiles(values)[0],
    "min": min,
}


def interleaved(keys: Sequence[T], repeats: int, rng: random.Random) -> Iterator[tuple[int, T]]:
    """(repeat, key) for `repeats` rounds that each run every key once, in an order shuffled per round by `rng`: slow
    drifts of a shared machine then hit every variant alike."""
    for repeat in range(repeats):
        order = list(keys)
        rng.shuffle(order)
        for key in order:
            yield repeat, key


# ------------------------------------------------------------------------------------------------- reporting
def format_cell(value: float | None, signed: bool = False, *, decimals: int) -> str:
    """A table cell: "—" for None, thousands without decimals, smaller values with `decimals` decimals."""
    if value is None:
        return "—"
    if abs(value) >= 1000:
        return f"{value:+,.0f}" if signed else f"{value:,.0f}"
    return f"{value:+.{decimals}f}" if signed else f"{value:.{decimals}f}"


def markdown_table(lines: list[list[str]], align: str) -> str:
    """A markdown table: the first line is the header; `align` has one of l / r per column."""
    rule = "|" + "|".join(":---" if side == "l" else "---:" for side in align) + "|"
    rows = ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join([rows[0], rule, *rows[1:]])


def command_line() -> str:
    """The command that is running, as it would be typed from the repository root: printed above a table so that
    the numbers can be traced to their options."""
    return shlex.join([os.path.relpath(sys.executable)] + sys.argv)


def environment(torch_threads: int, **peers: str) -> dict[str, Any]:
    """Where the numbers come from: Python, the machine, torch, tracktrain, then `peers` (library -> version or
    why it is missing) and the torch thread count."""
    import torch

    import tracktrain

    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "tracktrain": getattr(tracktrain, "__version__", "?"),
        **peers,
        "torch_threads": torch_threads,
    }


def print_heading(
    title: str, env: dict[str, Any], threads: int, peers: str, repeats: str, stat: str, quick: bool
) -> None:
    """The report's title, then one line on what ran where: versions, `peers` (already worded), the machine,
    `repeats` (already worded) and the statistic."""
    print(f"# {title}\n")
    print(
        f"python {env['python']}, torch {env['torch']} ({threads} thread(s)), tracktrain {env['tracktrain']}, "
        f"{peers}; {env['processor']}, {env['cpu_count']} CPUs; {repeats}, statistic: {stat}"
        f"{' (--quick: counts too small to trust)' if quick else ''}\n"
    )


def goal_line(
    goal: str, verdicts: list[tuple[str, str]], unit: str = "", unclear: str = "(within noise)",
    unclear_label: str = "margin within noise in",
) -> str:
    """The goal's verdict line, `<goal>: met in M of N <unit>; NOT met in: ...; <unclear_label>: ...`, from (name,
    verdict) pairs whose verdict starts with "yes" or "NO", or ends with `unclear`. It says that timing never fails."""
    met = [name for name, verdict in verdicts if verdict.startswith("yes")]
    missed = [name for name, verdict in verdicts if verdict.startswith("NO")]
    uncertain = [name for name, verdict in verdicts if verdict.endswith(unclear)]
    return (
        f"\n{goal}: met in {len(met)} of {len(verdicts)}{f' {unit}' if unit else ''}"
        + (f"; NOT met in: {', '.join(missed)}" if missed else "")
        + (f"; {unclear_label}: {', '.join(uncertain)}" if uncertain else "")
        + ". (Informational only: timing never fails this script.)"
    )


def write_json(path: str, payload: dict[str, Any]) -> None:
    """Writes `payload` (the results with every sample) to `path` and says so."""
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(payload, handle, indent=2)
    print(f"\nWrote {path}")


def exit_status(problems: list[str]) -> int:
    """0, or 1 after listing the failed sanity checks (each once) on stderr: only correctness fails a benchmark."""
    if not problems:
        return 0
    print("\nSANITY CHECKS FAILED (these are correctness problems, not timing):", file=sys.stderr)
    for problem in dict.fromkeys(problems):
        print(f"  {problem}", file=sys.stderr)
    return 1
