#!/usr/bin/env python
"""Per-iteration overhead of tracktrain's Engine, next to a hand-written loop, PyTorch-Ignite and Lightning.

Every case runs its variants in one process, interleaved (the order is shuffled in each repeat), after a
warm-up, with a fixed torch thread count. The figure reported for a variant is the median (or --stat), over
the repeats, of its time per iteration; its overhead is that figure minus the raw loop's.

    .venv/bin/python benchmarks/bench_engine_overhead.py --quick      # smoke test, ~40 s
    .venv/bin/python benchmarks/bench_engine_overhead.py              # the real run, ~1.5 min on 2 cores

Timing never makes this script fail. It exits with status 1 only when a sanity check fails: an engine did
not run the expected number of iterations, or tracktrain's handlers did not fire as often as Ignite's.
See benchmarks/README.md for how to read the table.
"""

from __future__ import annotations

import argparse
import atexit
import cProfile
import gc
import json
import math
import os
import platform
import pstats
import random
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import tracktrain
from tracktrain.engine import Engine as TTEngine
from tracktrain.engine import Events as TTEvents
from tracktrain.engine import create_supervised_trainer as tt_create_supervised_trainer

try:
    import ignite
    from ignite.engine import Engine as IgniteEngine
    from ignite.engine import Events as IgniteEvents
    from ignite.engine import create_supervised_trainer as ignite_create_supervised_trainer
except Exception as error:  # not installed, or an install that fails to import
    ignite = None
    IGNITE_MISSING = f"not installed ({type(error).__name__}: {error})"
else:
    IGNITE_MISSING = ""

RAW, TRACKTRAIN, IGNITE, LIGHTNING = "raw", "tracktrain", "ignite", "lightning"
GOAL_RATIO = 0.5  # the project's goal: tracktrain's overhead <= GOAL_RATIO x Ignite's, measured in the same run


# ------------------------------------------------------------------------------------------------------ setup
def make_mlp(sizes: tuple[int, ...]) -> nn.Sequential:
    """Linear layers of the given widths with ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for index, (width_in, width_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        if index:
            layers.append(nn.ReLU())
        layers.append(nn.Linear(width_in, width_out))
    return nn.Sequential(*layers)


def make_batches(
    sizes: tuple[int, ...], batch_size: int, count: int, seed: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randn(batch_size, sizes[0], generator=generator),
            torch.randn(batch_size, sizes[-1], generator=generator),
        )
        for _ in range(count)
    ]


class Workload:
    """One model, its optimizer and its data, shared by all the variants of a case.

    `reset()` puts the initial weights back before every timed run, so that each variant, in each repeat, does
    exactly the same arithmetic on the same numbers (SGD without momentum keeps no state of its own).
    """

    def __init__(self, sizes: tuple[int, ...], batch_size: int, n_batches: int, seed: int = 0) -> None:
        torch.manual_seed(seed)
        self.sizes = sizes
        self.batch_size = batch_size
        self.model = make_mlp(sizes)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        self.batches = make_batches(sizes, batch_size, n_batches, seed + 1)
        self._initial = {name: value.clone() for name, value in self.model.state_dict().items()}

    def reset(self) -> None:
        self.model.load_state_dict(self._initial)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)

    def describe(self) -> str:
        return f"MLP {'-'.join(map(str, self.sizes))}, batch {self.batch_size}, {len(self.batches)} batches/epoch"


def make_step(workload: Workload) -> Callable[[Any, Any], torch.Tensor]:
    """The hand-written process function shared by the tracktrain and Ignite engines."""
    model, optimizer = workload.model, workload.optimizer

    def train_step(engine: Any, batch: Any) -> torch.Tensor:
        x, y = batch
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return train_step


def noop_step(engine: Any, batch: Any) -> Any:
    return batch


def detached_loss(x: Any, y: Any, y_pred: Any, loss: torch.Tensor) -> torch.Tensor:
    """The output_transform given to both create_supervised_trainer (Ignite's own default calls .item())."""
    return loss.detach()


# ------------------------------------------------------------------------------------------------- variants
@dataclass
class Variant:
    """`body(epochs)` runs `epochs` epochs. It returns None to be timed from outside, or `(seconds, iterations)`
    when it times itself (Lightning, whose fit() has a long start-up that is not per-iteration overhead).
    `check(epochs)` runs after each timed run, outside the timing, and returns a problem or None."""

    name: str
    body: Callable[[int], tuple[float, int] | None]
    reset: Callable[[], None] | None = None
    check: Callable[[int], str | None] | None = None
    profile_target: Any = None  # what --profile runs under cProfile (the engine), None for no profile


@dataclass
class Case:
    key: str
    title: str
    detail: str
    batches_per_epoch: int
    epochs: int
    warmup_epochs: int
    variants: list[Variant]
    handler_counts: dict[str, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def iterations(self) -> int:
        return self.batches_per_epoch * self.epochs


def raw_training_variant(workload: Workload) -> Variant:
    model, optimizer, batches = workload.model, workload.optimizer, workload.batches

    def body(epochs: int) -> None:
        for _ in range(epochs):
            for x, y in batches:
                optimizer.zero_grad()
                loss = F.mse_loss(model(x), y)
                loss.backward()
                optimizer.step()
                output = loss.detach()  # the engines' step returns this too: same work, minus the engine
        del output

    return Variant(RAW, body, reset=workload.reset)


def raw_noop_variant(batches: list[Any]) -> Variant:
    def body(epochs: int) -> None:
        for _ in range(epochs):
            for batch in batches:
                pass

    return Variant(RAW, body)


def engine_variant(
    name: str, engine: Any, events: Any, data: list[Any], reset: Callable[[], None] | None
) -> Variant:
    """Variant running `engine.run(data, max_epochs=epochs)`, each time as a new run.

    A finished engine given a larger max_epochs would extend its last run instead (Ignite's semantics), so
    `state.max_epochs` is cleared before every run, outside the timing. A STARTED handler (one call per run)
    records the counters at the start, which lets `check` prove that the run really started from zero.
    """
    started_at: list[tuple[int, int]] = []

    def record_start(engine: Any) -> None:
        started_at.append((engine.state.epoch, engine.state.iteration))

    engine.add_event_handler(events.STARTED, record_start)

    def before_run() -> None:
        engine.state.max_epochs = None
        started_at.clear()
        if reset is not None:
            reset()

    def body(epochs: int) -> None:
        engine.run(data, max_epochs=epochs)

    def check(epochs: int) -> str | None:
        expected = epochs * len(data)
        if started_at != [(0, 0)]:
            return f"{name}: the run did not start afresh (epoch, iteration at STARTED: {started_at})"
        if engine.state.iteration != expected or engine.state.epoch != epochs:
            return (
                f"{name}: ran {engine.state.iteration} iterations / {engine.state.epoch} epochs, "
                f"expected {expected} / {epochs}"
            )
        return None

    return Variant(name, body, reset=before_run, check=check, profile_target=engine)


# Handlers for the "10 handlers" cases. Each does trivial work: one increment in a list of counters.
def count_with_engine(engine: Any, counts: list[int], index: int) -> None:
    counts[index] += 1


def count_without_engine(counts: list[int], index: int) -> None:
    counts[index] += 1


def every_13th_after_20(engine: Any, event: int) -> bool:
    """A custom event_filter."""
    return event > 20 and event % 13 == 0


def attach_ten_handlers(engine: Any, events: Any, counts: list[int]) -> None:
    """The same 10 handlers on a tracktrain or an Ignite engine: per iteration, 7 filters are evaluated and
    few handlers actually run, as with typical logging, checkpointing and validation handlers."""
    plan = [
        (events.ITERATION_COMPLETED(every=10), count_with_engine),
        (events.ITERATION_COMPLETED(every=100), count_with_engine),
        (events.ITERATION_COMPLETED(event_filter=every_13th_after_20), count_with_engine),
        (events.ITERATION_STARTED(every=50), count_with_engine),
        (events.ITERATION_STARTED(every=7), count_without_engine),
        (events.GET_BATCH_COMPLETED(once=5), count_with_engine),
        (events.GET_BATCH_STARTED(once=[10, 1000]), count_without_engine),
        (events.EPOCH_STARTED(every=2), count_with_engine),
        (events.EPOCH_COMPLETED, count_with_engine),
        (events.COMPLETED, count_without_engine),
    ]
    assert len(plan) == len(counts) == 10
    for index, (event, handler) in enumerate(plan):
        engine.add_event_handler(event, handler, counts, index)


def handlers_variant(
    name: str, engine: Any, events: Any, data: list[Any], reset: Callable[[], None] | None, case: Case
) -> Variant:
    """An engine variant with the 10 handlers attached; the case compares their call counts across engines."""
    counts = [0] * 10
    attach_ten_handlers(engine, events, counts)
    variant = engine_variant(name, engine, events, data, reset)
    inner_reset = variant.reset

    def zero_counts_then_reset() -> None:
        counts[:] = [0] * len(counts)
        if inner_reset is not None:
            inner_reset()

    variant.reset = zero_counts_then_reset
    case.handler_counts[variant.name] = counts
    return variant


# ---------------------------------------------------------------------------------------------- Lightning
def load_lightning() -> tuple[Any, str]:
    try:
        import logging

        import lightning.pytorch as lightning_pytorch

        for name in ("lightning", "lightning.pytorch", "lightning.fabric", "lightning_fabric"):
            logging.getLogger(name).setLevel(logging.ERROR)
        warnings.filterwarnings("ignore", module=r"lightning(\..*)?")
        warnings.filterwarnings("ignore", module=r"lightning_fabric(\..*)?")
        return lightning_pytorch, ""
    except Exception as error:
        return None, f"not installed ({type(error).__name__}: {error})"


def lightning_variant(lp: Any, workload: Workload, max_iterations: int, root_dir: str) -> Variant:
    """Trainer.fit in barebones mode (no logger, checkpoint, progress bar or summary) with the same step.

    fit() spends a long time starting up, which is not per-iteration overhead: a callback reads the clock at
    the end of every batch, and the time from the end of batch `skip` to the end of the last batch is divided
    by the number of batches in between. At most `max_iterations` are run per repeat (Lightning is slow).
    """
    model, batches = workload.model, workload.batches

    class StepModule(lp.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = model

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return F.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return workload.optimizer

    class Clock(lp.Callback):
        def __init__(self, skip: int) -> None:
            self.skip, self.done, self.start, self.end = skip, 0, 0.0, 0.0

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.done += 1
            now = time.perf_counter()
            if self.done == self.skip:
                self.start = now
            self.end = now

    class Batches:
        """The batches as one iterable: Lightning would take a plain list for a list of dataloaders."""

        def __iter__(self) -> Any:
            return iter(batches)

        def __len__(self) -> int:
            return len(batches)

    module, data = StepModule(), Batches()

    def body(epochs: int) -> tuple[float, int]:
        steps = min(epochs * len(batches), max_iterations)
        clock = Clock(skip=max(1, min(50, steps // 5)))
        trainer = lp.Trainer(
            accelerator="cpu",
            devices=1,
            barebones=True,
            max_steps=steps,
            max_epochs=math.ceil(steps / len(batches)) + 1,
            limit_val_batches=0,
            callbacks=[clock],
            default_root_dir=root_dir,
        )
        trainer.fit(module, train_dataloaders=data)
        if clock.done != steps:
            raise RuntimeError(f"lightning ran {clock.done} steps, expected {steps}")
        return clock.end - clock.start, clock.done - clock.skip

    return Variant(LIGHTNING, body, reset=workload.reset)


# -------------------------------------------------------------------------------------------------- cases
def training_cases(
    prefix: str, label: str, workload: Workload, epochs: int, warmup_epochs: int, lightning: Any,
    lightning_iterations: int, root_dir: str,
) -> list[Case]:
    data, reset = workload.batches, workload.reset
    step = make_step(workload)
    cases = []

    # a) b) c): the same hand-written step, with no handlers
    custom = Case(
        f"{prefix}-step", f"{label}: hand-written step", workload.describe(), len(data), epochs, warmup_epochs, []
    )
    custom.variants.append(raw_training_variant(workload))
    custom.variants.append(engine_variant(TRACKTRAIN, TTEngine(step), TTEvents, data, reset))
    if ignite is not None:
        custom.variants.append(engine_variant(IGNITE, IgniteEngine(step), IgniteEvents, data, reset))
    if lightning is not None:
        custom.variants.append(lightning_variant(lightning, workload, lightning_iterations, root_dir))
        custom.notes.append(
            f"lightning: Trainer(barebones=True).fit, steady state only (batches after the first few), "
            f"at most {lightning_iterations} iterations per repeat"
        )
    cases.append(custom)

    # d) create_supervised_trainer of each library, same output_transform
    supervised = Case(
        f"{prefix}-supervised", f"{label}: create_supervised_trainer", workload.describe(), len(data), epochs,
        warmup_epochs, [],
    )
    supervised.variants.append(raw_training_variant(workload))
    model, optimizer = workload.model, workload.optimizer
    trainer = tt_create_supervised_trainer(model, optimizer, F.mse_loss, output_transform=detached_loss)
    supervised.variants.append(engine_variant(TRACKTRAIN, trainer, TTEvents, data, reset))
    if ignite is not None:
        trainer = ignite_create_supervised_trainer(model, optimizer, F.mse_loss, output_transform=detached_loss)
        supervised.variants.append(engine_variant(IGNITE, trainer, IgniteEvents, data, reset))
    cases.append(supervised)

    # e) the hand-written step with 10 handlers on filtered events
    handlers = Case(
        f"{prefix}-handlers", f"{label}: hand-written step + 10 handlers", workload.describe(), len(data), epochs,
        warmup_epochs, [],
    )
    handlers.variants.append(raw_training_variant(workload))
    handlers.variants.append(handlers_variant(TRACKTRAIN, TTEngine(step), TTEvents, data, reset, handlers))
    if ignite is not None:
        handlers.variants.append(handlers_variant(IGNITE, IgniteEngine(step), IgniteEvents, data, reset, handlers))
    cases.append(handlers)
    return cases


def noop_cases(batches: list[Any], epochs: int, warmup_epochs: int) -> list[Case]:
    """f) A process function that returns the batch: the loop's own cost, and the cost of 10 handlers."""
    detail = f"process_function returns the batch, {len(batches)} batches/epoch"
    noop = Case("noop", "no-op step", detail, len(batches), epochs, warmup_epochs, [])
    noop.variants.append(raw_noop_variant(batches))
    noop.variants.append(engine_variant(TRACKTRAIN, TTEngine(noop_step), TTEvents, batches, None))
    if ignite is not None:
        noop.variants.append(engine_variant(IGNITE, IgniteEngine(noop_step), IgniteEvents, batches, None))

    handlers = Case("noop-handlers", "no-op step + 10 handlers", detail, len(batches), epochs, warmup_epochs, [])
    handlers.variants.append(raw_noop_variant(batches))
    handlers.variants.append(handlers_variant(TRACKTRAIN, TTEngine(noop_step), TTEvents, batches, None, handlers))
    if ignite is not None:
        handlers.variants.append(
            handlers_variant(IGNITE, IgniteEngine(noop_step), IgniteEvents, batches, None, handlers)
        )
    return [noop, handlers]


# -------------------------------------------------------------------------------------------------- timing
def run_once(variant: Variant, epochs: int, iterations: int, threads: int) -> float:
    """One timed run; returns microseconds per iteration."""
    if variant.reset is not None:
        variant.reset()
    torch.set_num_threads(threads)  # in case a library changed it
    gc.collect()
    start = time.perf_counter()
    measured = variant.body(epochs)
    elapsed = time.perf_counter() - start
    if measured is not None:
        elapsed, iterations = measured
    return elapsed / iterations * 1e6


def check_run(case: Case, variant: Variant, epochs: int, problems: list[str]) -> None:
    if variant.check is not None:
        problem = variant.check(epochs)
        if problem:
            problems.append(f"[{case.key}] {problem}")


def check_handler_counts(case: Case, problems: list[str]) -> None:
    if TRACKTRAIN in case.handler_counts and IGNITE in case.handler_counts:
        ours, theirs = case.handler_counts[TRACKTRAIN], case.handler_counts[IGNITE]
        if ours != theirs:
            problems.append(f"[{case.key}] handler call counts differ: tracktrain {ours} vs ignite {theirs}")


def measure_case(
    case: Case, repeats: int, threads: int, rng: random.Random, problems: list[str]
) -> dict[str, list[float]]:
    for variant in case.variants:  # warm-up: caches, allocator, lazy imports, first-call paths
        run_once(variant, case.warmup_epochs, case.batches_per_epoch * case.warmup_epochs, threads)
        check_run(case, variant, case.warmup_epochs, problems)
    check_handler_counts(case, problems)

    samples: dict[str, list[float]] = {variant.name: [] for variant in case.variants}
    for _ in range(repeats):
        order = list(case.variants)
        rng.shuffle(order)
        for variant in order:
            samples[variant.name].append(run_once(variant, case.epochs, case.iterations, threads))
            check_run(case, variant, case.epochs, problems)
        check_handler_counts(case, problems)
    return samples


def quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q3


STATISTICS: dict[str, Callable[[list[float]], float]] = {
    "median": statistics.median,
    "p25": lambda values: quartiles(values)[0],
    "min": min,
}


def summarize(case: Case, samples: dict[str, list[float]], statistic: str = "median") -> dict[str, Any]:
    center = STATISTICS[statistic]
    medians = {name: center(values) for name, values in samples.items()}
    raw = medians[RAW]
    overheads = {name: medians[name] - raw for name in medians if name != RAW}
    iqrs = {name: q3 - q1 for name, (q1, q3) in ((name, quartiles(values)) for name, values in samples.items())}
    # What a difference of medians has to beat to mean something: the widest spread among the compared runs.
    noise = max(iqrs[name] for name in (RAW, TRACKTRAIN, IGNITE) if name in iqrs)
    ratio, goal = None, "n/a"
    if TRACKTRAIN in overheads and IGNITE in overheads:
        ours, theirs = overheads[TRACKTRAIN], overheads[IGNITE]
        if theirs > noise:
            ratio = ours / theirs
            goal = "yes" if ratio <= GOAL_RATIO else "NO"
        else:
            goal = "below noise"
    return {
        "key": case.key,
        "title": case.title,
        "detail": case.detail,
        "iterations_per_run": case.iterations,
        "statistic": statistic,
        "us_per_iter": medians,  # the chosen statistic of the samples: the median unless --stat says otherwise
        "overhead_us_per_iter": overheads,
        "iqr_us_per_iter": iqrs,
        "noise_us_per_iter": noise,
        "tracktrain_over_ignite_overhead": ratio,
        "goal_met": goal,
        "samples_us_per_iter": samples,
        "handler_counts_last_run": {name: list(counts) for name, counts in case.handler_counts.items()},
        "notes": case.notes,
    }


def profile_case(case: Case, threads: int, top: int) -> None:
    """cProfile one run of each engine variant of the case; prints the functions with the most own time."""
    for variant in case.variants:
        if variant.profile_target is None:
            continue
        if variant.reset is not None:
            variant.reset()
        torch.set_num_threads(threads)
        profiler = cProfile.Profile()
        profiler.enable()
        variant.body(case.epochs)
        profiler.disable()
        print(f"\n### cProfile: {case.key} / {variant.name} ({case.iterations} iterations), top {top} by own time\n")
        print("```")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(top)
        print("```")


# ------------------------------------------------------------------------------------------------ reporting
def fmt(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "—"
    if abs(value) >= 1000:
        return f"{value:+,.0f}" if signed else f"{value:,.0f}"
    return f"{value:+.2f}" if signed else f"{value:.2f}"


def markdown_table(results: list[dict[str, Any]], has_lightning: bool) -> str:
    header = ["case", "iters/run", "raw µs/it", "tracktrain µs/it", "ignite µs/it"]
    if has_lightning:
        header.append("lightning µs/it")
    header += ["tracktrain overhead", "ignite overhead"]
    if has_lightning:
        header.append("lightning overhead")
    header += ["noise (max IQR)", "tt/ignite overhead", f"goal ≤ {GOAL_RATIO}×"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 2) + [":---"]) + "|"]
    for result in results:
        medians, overheads = result["us_per_iter"], result["overhead_us_per_iter"]
        missing = "not installed"
        row = [
            result["title"],
            str(result["iterations_per_run"]),
            fmt(medians[RAW]),
            fmt(medians.get(TRACKTRAIN)),
            fmt(medians[IGNITE]) if IGNITE in medians else missing,
        ]
        if has_lightning:
            row.append(fmt(medians.get(LIGHTNING)))
        tt_overhead = overheads.get(TRACKTRAIN)
        tt_cell = fmt(tt_overhead, True)
        if tt_overhead is not None and medians[RAW] >= 1.0:
            tt_cell += f" ({tt_overhead / medians[RAW]:+.1%})"
        row += [tt_cell, fmt(overheads[IGNITE], True) if IGNITE in overheads else missing]
        if has_lightning:
            row.append(fmt(overheads.get(LIGHTNING), True))
        ratio = result["tracktrain_over_ignite_overhead"]
        row += [fmt(result["noise_us_per_iter"]), "—" if ratio is None else f"{ratio:.2f}", result["goal_met"]]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def environment() -> dict[str, Any]:
    info = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "tracktrain": getattr(tracktrain, "__version__", "?"),
        "ignite": ignite.__version__ if ignite is not None else IGNITE_MISSING,
        "torch_threads": torch.get_num_threads(),
    }
    return info


# ---------------------------------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--iters", type=int, help="iterations per timed run, tiny model, rounded to whole epochs of 100 batches "
        "(default 3000; --quick 500)")
    add("--medium-iters", type=int, help="the same for the medium model, epochs of 10 batches (default 20; --quick 10)")
    add("--noop-iters", type=int, help="the same for the no-op step, epochs of 100 (default 50000; --quick 10000)")
    add("--lightning-iters", type=int, help="cap on Lightning's iterations per timed run (default 1000; --quick 200)")
    add("--repeats", type=int, help="timed runs per variant and case (default 9; --quick 3)")
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke test, not a measurement")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads for every run (default 1)")
    parser.add_argument(
        "--cases", default="all",
        help="comma-separated case keys or prefixes: tiny, medium, noop, tiny-step, noop-handlers, ... (default all)",
    )
    parser.add_argument("--no-lightning", action="store_true", help="leave Lightning out (it is slow to import)")
    parser.add_argument("--profile", action="store_true", help="after timing, cProfile one run of each engine per case")
    parser.add_argument("--profile-top", type=int, default=25, help="rows of each profile (default 25)")
    parser.add_argument(
        "--stat", choices=sorted(STATISTICS), default="median",
        help="statistic of the repeats to report (default median; p25 or min resist interference from other processes)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the data and of the shuffled orders")
    parser.add_argument("--json", metavar="PATH", help="also write all results (with every sample) to PATH")
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "iters": (3000, 500),
        "medium_iters": (20, 10),
        "noop_iters": (50_000, 10_000),
        "lightning_iters": (1000, 200),
        "repeats": (9, 3),
    }
    for name, (full, small) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, small if quick else full)
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    return args


def selected(key: str, wanted: str) -> bool:
    if wanted == "all":
        return True
    return any(key == item or key.startswith(item + "-") for item in wanted.split(","))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    rng = random.Random(args.seed)

    lightning = None
    lightning_status = "left out (--no-lightning)"
    if not args.no_lightning and (selected("tiny-step", args.cases) or selected("medium-step", args.cases)):
        lightning, lightning_status = load_lightning()
        if lightning is not None:
            lightning_status = lightning.__version__
    root_dir = tempfile.mkdtemp(prefix="tracktrain-bench-")  # Lightning's default_root_dir; stays empty
    atexit.register(shutil.rmtree, root_dir, True)

    tiny_batches, medium_batches = 100, 10
    cases: list[Case] = []
    tiny_epochs = max(1, round(args.iters / tiny_batches))
    if any(selected(f"tiny-{kind}", args.cases) for kind in ("step", "supervised", "handlers")):
        tiny = Workload((32, 32, 1), 64, tiny_batches, seed=args.seed)
        cases += training_cases(
            "tiny", "tiny MLP", tiny, tiny_epochs, max(1, tiny_epochs // 5), lightning,
            args.lightning_iters, root_dir,
        )
    if any(selected(f"medium-{kind}", args.cases) for kind in ("step", "supervised", "handlers")):
        medium = Workload((512, 1024, 1024, 10), 128, medium_batches, seed=args.seed)
        medium_epochs = max(1, round(args.medium_iters / medium_batches))
        medium_lightning_iters = max(medium_batches, min(args.lightning_iters, medium_epochs * medium_batches))
        cases += training_cases(
            "medium", "medium MLP", medium, medium_epochs, 1, lightning, medium_lightning_iters, root_dir,
        )
    if any(selected(key, args.cases) for key in ("noop", "noop-handlers")):
        noop_epochs = max(1, round(args.noop_iters / tiny_batches))
        cases += noop_cases(list(range(tiny_batches)), noop_epochs, max(1, noop_epochs // 10))
    cases = [case for case in cases if selected(case.key, args.cases)]
    for case in cases:
        if not case.key.endswith("-step"):
            case.variants = [variant for variant in case.variants if variant.name != LIGHTNING]
    if not cases:
        print(f"No case matches --cases {args.cases!r}.", file=sys.stderr)
        return 2

    # Everything built so far (torch, the libraries, models, engines) lives until the end: move it out of the
    # collector's sight, so that the gc.collect() before each run and any collection during a run stay cheap.
    gc.collect()
    gc.freeze()

    env = environment()
    print("# tracktrain Engine overhead per iteration\n")
    print(
        f"python {env['python']}, torch {env['torch']} ({args.threads} thread(s)), tracktrain {env['tracktrain']}, "
        f"ignite {env['ignite']}, lightning {lightning_status}; {env['processor']}, {env['cpu_count']} CPUs; "
        f"{args.repeats} interleaved repeats per case, statistic: {args.stat}"
        f"{' (--quick: counts too small to trust)' if args.quick else ''}\n"
    )
    problems: list[str] = []
    results = []
    for case in cases:
        started = time.perf_counter()
        samples = measure_case(case, args.repeats, args.threads, rng, problems)
        result = summarize(case, samples, args.stat)
        results.append(result)
        cells = ", ".join(f"{name} {fmt(value)}" for name, value in result["us_per_iter"].items())
        print(f"- {case.title} [{case.key}] ({case.detail}; {case.iterations} it/run): {cells} µs/it "
              f"[{time.perf_counter() - started:.1f} s]", flush=True)

    has_lightning = any(LIGHTNING in result["us_per_iter"] for result in results)
    print("\n" + markdown_table(results, has_lightning) + "\n")
    print(
        f"µs/it: {args.stat} over the repeats of (time of a run / its iterations). overhead: variant − raw "
        "(for tracktrain also as a share of the raw step). noise: the largest interquartile range among "
        "the raw, tracktrain and ignite samples. tt/ignite overhead: tracktrain overhead / ignite overhead, given "
        f"only where ignite's overhead exceeds the noise; goal: ≤ {GOAL_RATIO}; 'below noise': the step is too "
        "long next to the overheads for this run to tell them apart."
    )
    for result in results:
        for note in result["notes"]:
            print(f"- {result['title']}: {note}")
    if ignite is None:
        print(f"\nignite: {IGNITE_MISSING}; its columns are empty and the goal cannot be checked.")
    else:
        verdicts = [(result["title"], result["goal_met"]) for result in results if result["goal_met"] != "n/a"]
        missed = [title for title, verdict in verdicts if verdict == "NO"]
        unclear = [title for title, verdict in verdicts if verdict == "below noise"]
        print(
            f"\nGoal (tracktrain overhead ≤ {GOAL_RATIO} × ignite's): met in "
            f"{sum(verdict == 'yes' for _, verdict in verdicts)} of {len(verdicts)} cases"
            + (f"; NOT met in: {', '.join(missed)}" if missed else "")
            + (f"; overheads below noise in: {', '.join(unclear)}" if unclear else "")
            + ". (Informational only: timing never fails this script.)"
        )

    if args.profile:
        for case in cases:
            profile_case(case, args.threads, args.profile_top)

    if args.json:
        payload = {
            "environment": env,
            "lightning": lightning_status,
            "arguments": vars(args),
            "results": results,
            "problems": problems,
        }
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=2)
        print(f"\nWrote {args.json}")

    if problems:
        print("\nSANITY CHECKS FAILED (these are correctness problems, not timing):", file=sys.stderr)
        for problem in dict.fromkeys(problems):
            print(f"  {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
