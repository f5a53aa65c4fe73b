"""The benchmarks' shared harness: the command line, the set-up of a timed process, the interleaved order of the
repeats, statistics and goal verdicts, cProfile listings, markdown tables and the report's frame (heading, goal
line, JSON file, exit status). The models, data and peers are in `workloads.py`.

The scripts run as `python benchmarks/<script>.py`, which puts this folder first on sys.path, so they import this
module as `harness`. It imports torch and tracktrain only inside the functions that need them: the import-time
benchmark uses it too.
"""

from __future__ import annotations

import argparse
import atexit
import cProfile
import gc
import json
import os
import platform
import pstats
import random
import shlex
import shutil
import statistics
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


# ---------------------------------------------------------------------------------------------- command line
def parse(
    doc: str,
    argv: list[str] | None,
    counts: dict[str, tuple[int, int, str]],
    *,
    options: Callable[[Callable[..., Any]], None] | None = None,
    positive: Sequence[str] = (),
    at_least_two: Sequence[str] = (),
    cases: Sequence[str] = (),
    lightning: bool = True,
    profile_top: int | None = None,
    root_dir: str | None = None,
    stat_of: str = "the repeats",
) -> argparse.Namespace:
    """The one command line: the options every benchmark has (--quick, --threads, --stat, --seed, --json); on
    request --no-lightning, --profile / --profile-top (`profile_top` rows by default) and --root-dir (`root_dir`:
    what goes there); an integer option per `counts` item (name -> (full default, --quick default, what it
    counts)); the script's own `options(add)`. The options named in `positive` must be ≥ 1, those in
    `at_least_two` ≥ 2 (their first epoch, or fit, is not timed), and with `cases` every --cases item one of them."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    add = parser.add_argument
    add("--quick", action="store_true", help="small counts: a smoke test, not a measurement")
    add("--threads", type=int, default=1, help="torch.set_num_threads for every run (default 1)")
    add(
        "--stat",
        choices=sorted(STATISTICS),
        default="median",
        help=f"statistic of {stat_of} to report (default median; p25 or min resist interference from other processes)",
    )
    add("--seed", type=int, default=0, help="seed of the data, the weights and the shuffled orders")
    add("--json", metavar="PATH", help="also write all results (with every sample) to PATH")
    if lightning:
        add("--no-lightning", action="store_true", help="leave Lightning out")
    if profile_top is not None:
        add("--profile", action="store_true", help="after timing, cProfile the runs the script names")
        add("--profile-top", type=int, default=profile_top, help=f"rows of each profile (default {profile_top})")
    if root_dir is not None:
        add(
            "--root-dir",
            help=f"where {root_dir} go, in a temporary directory made and removed there (default: "
            "the system's temporary directory); a tmpfs such as /dev/shm leaves the disk out",
        )
    for name, (full, quick, what) in counts.items():
        add(f"--{name.replace('_', '-')}", type=int, help=f"{what} (default {full}; --quick {quick})")
    if options is not None:
        options(add)
    args = parser.parse_args(argv)
    for name, (full, quick, _) in counts.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    for name, least in [(name, 1) for name in positive] + [(name, 2) for name in at_least_two]:
        if getattr(args, name) < least:
            why = "be positive" if least == 1 else "be at least 2 (the first is not timed)"
            parser.error(f"--{name.replace('_', '-')} must {why}, got {getattr(args, name)}")
    unknown = set(args.cases.split(",")) - set(cases) if cases else set()
    if unknown:
        parser.error(f"--cases: unknown case(s) {sorted(unknown)}; use {', '.join(cases)}")
    return args


# ------------------------------------------------------------------------------------------------- the process
def prepare(args: argparse.Namespace) -> random.Random:
    """The torch settings of every timed process (a fixed thread count: the intra-op pool adds no noise; no
    denormals), and the generator of the shuffled orders."""
    import torch

    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    return random.Random(args.seed)


def temporary_root(prefix: str, parent: str | None = None) -> str:
    """A temporary directory under `parent` (default: the system's), removed when the process exits."""
    root = tempfile.mkdtemp(prefix=prefix, dir=parent)
    atexit.register(shutil.rmtree, root, True)
    return root


def freeze_garbage() -> None:
    """Everything built so far (torch, the libraries, the data) lives until the end: out of the collector's sight,
    so that the gc.collect() before each run, and any collection during one, stay cheap."""
    gc.collect()
    gc.freeze()


def before_run(threads: int) -> None:
    """Outside the timing, before every run: the thread count again (a library may have changed it), and a
    collection now rather than inside the run."""
    import torch

    torch.set_num_threads(threads)
    gc.collect()


def interleaved(keys: Sequence[T], repeats: int, rng: random.Random) -> Iterator[tuple[int, T]]:
    """(repeat, key) for `repeats` rounds that each run every key once, in an order shuffled per round by `rng`: slow
    drifts of a shared machine then hit every variant alike."""
    for repeat in range(repeats):
        order = list(keys)
        rng.shuffle(order)
        for key in order:
            yield repeat, key


def measure(
    keys: Sequence[T],
    repeats: int,
    rng: random.Random,
    run: Callable[[T], Any],
    warmup: bool | Callable[[T], Any] = True,
    after_round: Callable[[], None] | None = None,
    label: Callable[[T], Any] = lambda key: key,
) -> dict:
    """The one timing loop: an untimed warm-up run of each key (first-call paths, caches, the allocator: `run`,
    or the `warmup` function given, e.g. a shorter run; none with False), then `repeats` interleaved rounds.
    `run(key)` runs once, checks the run and returns its sample (a number, or a fit the caller reads);
    `after_round()` checks what a whole round did (the warm-up included). Returns key -> the samples, in round
    order (index i of every key ran in round i, which `against` pairs)."""
    if warmup:
        for key in keys:
            (run if warmup is True else warmup)(key)
        if after_round is not None:
            after_round()
    samples: dict[Any, list[Any]] = {label(key): [] for key in keys}
    for _ in range(repeats):
        for _, key in interleaved(list(keys), 1, rng):
            samples[label(key)].append(run(key))
        if after_round is not None:
            after_round()
    return samples


# -------------------------------------------------------------------------------------------------- statistics
def quartiles(values: list[float]) -> tuple[float, float]:
    """(first, third) quartile; a single value is both."""
    if len(values) < 2:
        return values[0], values[0]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q3


def iqr(values: list[float]) -> float:
    """The interquartile range: differences of medians smaller than it are not meaningful."""
    q1, q3 = quartiles(values)
    return q3 - q1


# --stat's choices: the figure reported for a variant, over its repeats
STATISTICS: dict[str, Callable[[list[float]], float]] = {
    "median": statistics.median,
    "p25": lambda values: quartiles(values)[0],
    "min": min,
}


def against(samples: dict[str, list[float]], baseline: str, statistic: str = "median") -> dict[str, dict[str, float]]:
    """Every variant next to `baseline`, in the one layout the tables read: `figure` (the statistic over its
    samples) and `iqr` of each; of the others, `difference` and `ratio` of the figures, and the paired ones
    (`paired_difference`, `paired_ratio` with its `paired_ratio_iqr`): medians of the per-round differences and
    ratios, which a drift longer than a round does not move."""
    center = STATISTICS[statistic]
    figure = {name: center(values) for name, values in samples.items()}
    base = samples[baseline]
    others = [name for name in samples if name != baseline]
    ratios = {name: [mine / theirs for mine, theirs in zip(samples[name], base)] for name in others}
    return {
        "figure": figure,
        "iqr": {name: iqr(values) for name, values in samples.items()},
        "difference": {name: figure[name] - figure[baseline] for name in others},
        "ratio": {name: figure[name] / figure[baseline] for name in others},
        "paired_difference": {
            name: statistics.median(mine - theirs for mine, theirs in zip(samples[name], base)) for name in others
        },
        "paired_ratio": {name: statistics.median(values) for name, values in ratios.items()},
        "paired_ratio_iqr": {name: iqr(values) for name, values in ratios.items()},
    }


def compare(
    case: str,
    samples: dict[str, list[float]],
    baseline: str | dict[str, str | Sequence[str] | None] | None,
    unit: str,
    statistic: str = "median",
    **extra: dict[str, Any],
) -> list[dict[str, Any]]:
    """The one row layout of every benchmark's table and JSON: one row per variant of `case` with its `value` (the
    statistic over its samples, in `unit`), `iqr`, and next to its baseline (`baseline`: one variant for all, or
    variant -> its own, or several: a row for each, or None) the `ratio` and `difference` paired per round (medians of the per-round ratios and
    differences, which a drift longer than a round does not move) with the ratios' `ratio_iqr`; then `samples`.
    `extra` adds columns: name -> {variant: value}."""
    center = STATISTICS[statistic]
    rows = []
    for name, values in samples.items():
        bases = baseline.get(name) if isinstance(baseline, dict) else baseline
        bases = [bases] if bases is None or isinstance(bases, str) else list(bases)
        for base in [base for base in bases if base in samples and base != name] or [None]:
            paired = against({name: values, base: samples[base]}, base) if base else None
            rows.append(
                {
                    "case": case,
                    "variant": name,
                    "unit": unit,
                    "value": center(values),
                    "iqr": iqr(values),
                    "baseline": base,
                    "ratio": paired["paired_ratio"][name] if paired else None,
                    "ratio_iqr": paired["paired_ratio_iqr"][name] if paired else None,
                    "difference": paired["paired_difference"][name] if paired else None,
                    **{column: by_variant.get(name) for column, by_variant in extra.items()},
                    "samples": values,
                }
            )
    return rows


def overhead_goal(
    samples: dict[str, list[float]],
    ours: tuple[str, str],
    theirs: tuple[str, str],
    goal: float,
    statistic: str = "median",
) -> dict[str, dict[str, Any]]:
    """`compare`'s extra columns for a goal on overheads: what `ours` (variant, the same without what is measured:
    e.g. the raw loop) costs, over what `theirs` costs (`overhead_ratio`, given only where theirs exceeds the noise:
    the widest IQR of the four), and whether it is at most `goal` (`goal`: the ratio, the goal and its `verdict`).
    On `ours`'s rows; empty when a variant did not run."""
    if any(name not in samples for name in (*ours, *theirs)):
        return {"overhead_ratio": {}, "goal": {}}
    center = STATISTICS[statistic]
    mine, their = (center(samples[a]) - center(samples[b]) for a, b in (ours, theirs))
    noise = max(iqr(samples[name]) for name in {*ours, *theirs})
    ratio = mine / their if their > noise else None
    text = f"{'—' if ratio is None else f'{ratio:.3f}'} ≤ {goal:.2g}: {verdict(goal * their - mine, noise)}"
    return {"overhead_ratio": {ours[0]: ratio}, "goal": {ours[0]: text}}


def goals(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """(case / variant, verdict) of every row with a `goal` column, once per variant, for `goal_line`."""
    found = {f"{row['case']} / {row['variant']}": row["goal"].split(": ", 1)[1] for row in rows if row.get("goal")}
    return list(found.items())


def ratio_goal(
    samples: dict[str, list[float]],
    baseline: str,
    ours: str,
    goal: float,
    statistic: str = "median",
    least: bool = False,
) -> dict[str, dict[str, Any]]:
    """`compare`'s `goal` column for a goal on a ratio of figures: `ours` over `baseline` at most `goal` (at least,
    with `least`), its `verdict` against the noise (the larger IQR of the two, over the baseline's figure)."""
    center = STATISTICS[statistic]
    ratio = center(samples[ours]) / center(samples[baseline])
    noise = max(iqr(samples[ours]), iqr(samples[baseline])) / center(samples[baseline])
    margin = ratio - goal if least else goal - ratio
    return {"goal": {ours: f"{ratio:.3f} {'≥' if least else '≤'} {goal:g}: {verdict(margin, noise)}"}}


def report(rows: Sequence[dict[str, Any]], *columns: str, decimals: int = 2) -> str:
    """The one table of every benchmark, from `compare`'s rows: case, variant, value and IQR in the rows' unit, the
    paired difference and ratio to the baseline (with the ratios' IQR), then the `columns` named (extra fields)."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return format_cell(value, decimals=decimals)
        return "—" if value is None else str(value)

    layout = [
        ("case", "l", lambda row: row["case"]),
        ("variant", "l", lambda row: row["variant"]),
        ("value", "r", lambda row: f"{format_cell(row['value'], decimals=decimals)} {row['unit']}"),
        ("IQR", "r", lambda row: format_cell(row["iqr"], decimals=decimals)),
        ("vs", "l", lambda row: row["baseline"] or "—"),
        ("− vs", "r", lambda row: format_cell(row["difference"], signed=True, decimals=decimals)),
        (
            "× vs (IQR)",
            "r",
            lambda row: "—" if row["ratio"] is None else f"{row['ratio']:.3f} ({row['ratio_iqr']:.3f})",
        ),
        *((column, "r", lambda row, column=column: cell(row.get(column))) for column in columns),
    ]
    text = table(rows, layout)
    print("\n" + text + "\n")
    return text


def verdict(margin: float, noise: float) -> str:
    """A goal's verdict from the measured margin (≥ 0: met): `yes` or `NO`, with "(within noise)" when the margin,
    either way, is smaller than the noise, so another run may well say otherwise."""
    goal = "yes" if margin >= 0 else "NO"
    return goal + " (within noise)" if abs(margin) <= noise else goal


# ---------------------------------------------------------------------------------------------------- profiles
def print_profile(
    profile: cProfile.Profile | pstats.Stats, title: str, top: int, sort: str = "tottime", only: str | None = None
) -> None:
    """`title`, then the `top` rows of the profile sorted by `sort`, only the functions whose path matches `only`
    when given, in a code block."""
    stats = profile if isinstance(profile, pstats.Stats) else pstats.Stats(profile, stream=sys.stdout)
    print(f"{title}\n\n```")
    stats.sort_stats(sort).print_stats(*([only] if only else []), top)
    print("```")


class ThreadProfiles:
    """cProfile of every thread started while it is installed (e.g. the loggers' delivery threads; a child
    process's work is not here), grouped by thread name; the calling thread is profiled apart."""

    def __init__(self) -> None:
        self.by_thread: dict[str, list[cProfile.Profile]] = {}

    def __enter__(self) -> ThreadProfiles:
        threading.setprofile(self._start)
        return self

    def __exit__(self, *exc: Any) -> None:
        threading.setprofile(None)

    def _start(self, frame: Any, event: str, arg: Any) -> None:
        sys.setprofile(None)
        profiler = cProfile.Profile()
        name = threading.current_thread().name.rstrip("0123456789-_ ") or "thread"
        self.by_thread.setdefault(name, []).append(profiler)
        profiler.enable()  # from here this thread's calls are counted (enable() sets this thread's hook only)

    def stats(self) -> dict[str, pstats.Stats]:
        merged = {}
        for name, profilers in self.by_thread.items():
            stats = pstats.Stats(profilers[0], stream=sys.stdout)
            for profiler in profilers[1:]:
                stats.add(profiler)
            merged[name] = stats
        return merged


# --------------------------------------------------------------------------------------------------- reporting
def format_cell(value: float | None, signed: bool = False, *, decimals: int) -> str:
    """A table cell: "—" for None, thousands without decimals, smaller values with `decimals` decimals."""
    if value is None:
        return "—"
    if abs(value) >= 1000:
        return f"{value:+,.0f}" if signed else f"{value:,.0f}"
    return f"{value:+.{decimals}f}" if signed else f"{value:.{decimals}f}"


def table(rows: Sequence[Any], columns: Sequence[tuple[str, str, Callable[[Any], str]]]) -> str:
    """The one table format: a markdown table of one line per row; `columns` are (header, l or r, the cell of a
    row)."""
    lines = [[header for header, _, _ in columns]] + [[cell(row) for _, _, cell in columns] for row in rows]
    text = ["| " + " | ".join(line) + " |" for line in lines]
    rule = "|" + "|".join(":---" if align == "l" else "---:" for _, align, _ in columns) + "|"
    return "\n".join([text[0], rule, *text[1:]])


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


def start(title: str, args: argparse.Namespace, repeats: str, **peers: str) -> dict[str, Any]:
    """The report's title, then one line on what runs where: versions, each peer library's version or why it is
    missing (`peers`: name -> either), the machine, `repeats` (already worded) and --stat. Returns the
    `environment` for the JSON file."""
    env = environment(args.threads, **peers)
    print(f"# {title}\n")
    print(
        f"python {env['python']}, torch {env['torch']} ({args.threads} thread(s)), tracktrain {env['tracktrain']}, "
        + (", ".join(f"{name} {status}" for name, status in peers.items()) or "no peer library")
        + f"; {env['processor']}, {env['cpu_count']} CPUs; {repeats}, statistic: {args.stat}"
        f"{' (--quick: counts too small to trust)' if args.quick else ''}\n"
    )
    return env


def goal_line(goal: str, verdicts: list[tuple[str, str]], unit: str = "") -> str:
    """The goal's verdict line, `<goal>: met in M of N <unit>; NOT met in: ...; margin within noise in: ...`, from
    `goals`' (name, verdict) pairs. It says that timing never fails."""
    met = [name for name, verdict in verdicts if verdict.startswith("yes")]
    missed = [name for name, verdict in verdicts if verdict.startswith("NO")]
    uncertain = [name for name, verdict in verdicts if verdict.endswith("(within noise)")]
    return (
        f"\n{goal}: met in {len(met)} of {len(verdicts)}{f' {unit}' if unit else ''}"
        + (f"; NOT met in: {', '.join(missed)}" if missed else "")
        + (f"; margin within noise in: {', '.join(uncertain)}" if uncertain else "")
        + ". (Informational only: timing never fails this script.)"
    )


def finish(args: argparse.Namespace, payload: dict[str, Any], problems: list[str]) -> int:
    """The end of every benchmark: the JSON file when --json asks for it (`payload`, with every sample, and the
    problems), then the exit status: 0, or 1 after listing the failed sanity checks (each once) on stderr: only
    correctness fails a benchmark."""
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({**payload, "problems": problems}, handle, indent=2)
        print(f"\nWrote {args.json}")
    if not problems:
        return 0
    print("\nSANITY CHECKS FAILED (these are correctness problems, not timing):", file=sys.stderr)
    for problem in dict.fromkeys(problems):
        print(f"  {problem}", file=sys.stderr)
    return 1
