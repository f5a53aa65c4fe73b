#!/usr/bin/env python
"""Per-iteration overhead of tracktrain's Engine, next to a hand-written loop, PyTorch-Ignite and Lightning.

Every case runs its variants in one process, interleaved (the order is shuffled in each repeat), after a
warm-up, with a fixed torch thread count. The figure reported for a variant is the median (or --stat), over
the repeats, of its time per iteration; its overhead is that figure minus the raw loop's.

The add-on cases (tiny-metrics, tiny-pbar) measure what metrics and a progress bar cost on top of each engine:
(the engine with them) − (the same engine without them), per library, in a second table.

    .venv/bin/python benchmarks/bench_engine_overhead.py --quick      # smoke test, ~50 s
    .venv/bin/python benchmarks/bench_engine_overhead.py              # the real run, ~3 min on 2 cores

Timing never makes this script fail. It exits with status 1 only when a sanity check fails: an engine did
not run the expected number of iterations, tracktrain's handlers did not fire as often as Ignite's, the two
libraries' metrics computed different values, or a progress bar meant to draw on the terminal wrote nothing.
See benchmarks/README.md for how to read the tables.
"""

from __future__ import annotations

import argparse
import atexit
import cProfile
import fcntl
import functools
import gc
import io
import math
import os
import pstats
import pty
import random
import shutil
import struct
import sys
import tempfile
import termios
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from _common import (
    STATISTICS, environment, exit_status, format_cell, goal_line, make_mlp, print_heading, quartiles,
    silence_lightning, write_json,
)
from tracktrain.engine import Engine as TTEngine
from tracktrain.engine import Events as TTEvents
from tracktrain.engine import create_supervised_trainer as tt_create_supervised_trainer
from tracktrain.handlers import ProgressBar as TTProgressBar
from tracktrain.metrics import Accuracy as TTAccuracy
from tracktrain.metrics import Loss as TTLoss
from tracktrain.metrics import RunningAverage as TTRunningAverage

try:
    import ignite
    from ignite.engine import Engine as IgniteEngine
    from ignite.engine import Events as IgniteEvents
    from ignite.engine import create_supervised_trainer as ignite_create_supervised_trainer
    from ignite.handlers import ProgressBar as IgniteProgressBar
    from ignite.metrics import Accuracy as IgniteAccuracy
    from ignite.metrics import Loss as IgniteLoss
    from ignite.metrics import RunningAverage as IgniteRunningAverage
except Exception as error:  # not installed, or an install that fails to import
    ignite = None
    IGNITE_MISSING = f"not installed ({type(error).__name__}: {error})"
else:
    IGNITE_MISSING = ""

RAW, TRACKTRAIN, IGNITE, LIGHTNING = "raw", "tracktrain", "ignite", "lightning"
GOAL_RATIO = 0.5  # the project's goal: tracktrain's overhead <= GOAL_RATIO x Ignite's, measured in the same run
ADDON_GOAL_RATIO = 1.0  # for metrics and the progress bar: tracktrain's cost <= Ignite's


# ------------------------------------------------------------------------------------------------------ setup
def make_batches(
    sizes: tuple[int, ...], batch_size: int, count: int, seed: int, classify: bool = False
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Random inputs with random targets: real values of the output width, or (`classify`) class indices."""
    generator = torch.Generator().manual_seed(seed)

    def target() -> torch.Tensor:
        if classify:
            return torch.randint(0, sizes[-1], (batch_size,), generator=generator)
        return torch.randn(batch_size, sizes[-1], generator=generator)

    return [(torch.randn(batch_size, sizes[0], generator=generator), target()) for _ in range(count)]


class Workload:
    """One model, its optimizer and its data, shared by all the variants of a case.

    `reset()` puts the initial weights back before every timed run, so that each variant, in each repeat, does
    exactly the same arithmetic on the same numbers (SGD without momentum keeps no state of its own).
    """

    def __init__(
        self, sizes: tuple[int, ...], batch_size: int, n_batches: int, seed: int = 0, classify: bool = False
    ) -> None:
        torch.manual_seed(seed)
        self.sizes = sizes
        self.batch_size = batch_size
        self.classify = classify  # targets are class indices (cross-entropy) rather than values (MSE)
        self.model = make_mlp(sizes)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        self.batches = make_batches(sizes, batch_size, n_batches, seed + 1, classify)
        self._initial = {name: value.clone() for name, value in self.model.state_dict().items()}

    def reset(self) -> None:
        self.model.load_state_dict(self._initial)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)

    def describe(self) -> str:
        task = f", {self.sizes[-1]} classes, cross-entropy" if self.classify else ""
        return (
            f"MLP {'-'.join(map(str, self.sizes))}{task}, batch {self.batch_size}, {len(self.batches)} batches/epoch"
        )


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
class Addon:
    """Something attached to an engine (metrics, a progress bar) whose per-iteration cost is measured as
    (engine with it) − (the same engine without it), for each library. Its variants are named
    `tracktrain<suffix>` and `ignite<suffix>`; `in_goal` False reports it without counting it for the goal."""

    suffix: str
    label: str
    in_goal: bool = True


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
    # add-on cases (metrics, progress bar): what is compared is "engine + add-on" against the same engine alone
    addons: list[Addon] = field(default_factory=list)
    # checks across variants (e.g. both libraries computed the same metrics), run after each round of runs
    cross_checks: list[Callable[[], str | None]] = field(default_factory=list)
    # notes whose text is known only after the runs (e.g. how often a bar drew)
    late_notes: list[Callable[[], str]] = field(default_factory=list)

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
        import lightning.pytorch as lightning_pytorch

        silence_lightning()
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


# ------------------------------------------------------------------------------------------- add-on cases
# Metrics and the progress bar are measured as (engine with them) − (the same engine without them), per library.
def make_classifier_step(workload: Workload) -> Callable[[Any, Any], tuple[torch.Tensor, ...]]:
    """The classifier's process function, shared by both engines: returns (y_pred, y, loss), all detached."""
    model, optimizer = workload.model, workload.optimizer

    def train_step(engine: Any, batch: Any) -> tuple[torch.Tensor, ...]:
        x, y = batch
        optimizer.zero_grad()
        y_pred = model(x)
        loss = F.cross_entropy(y_pred, y)
        loss.backward()
        optimizer.step()
        return y_pred.detach(), y, loss.detach()

    return train_step


def raw_classifier_variant(workload: Workload) -> Variant:
    model, optimizer, batches = workload.model, workload.optimizer, workload.batches

    def body(epochs: int) -> None:
        for _ in range(epochs):
            for x, y in batches:
                optimizer.zero_grad()
                y_pred = model(x)
                loss = F.cross_entropy(y_pred, y)
                loss.backward()
                optimizer.step()
                output = y_pred.detach(), y, loss.detach()  # what the engines' step returns; no metric
        del output

    return Variant(RAW, body, reset=workload.reset)


# The same output_transforms for both libraries (module-level functions, so neither pays for a closure).
def prediction_and_target(output: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    return output[0], output[1]


def loss_of(output: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return output[2]


def the_output(output: Any) -> Any:
    return output


def batch_loss_postfix(output: Any) -> dict[str, Any]:
    return {"batch_loss": output}


def metric_classes(library: str) -> tuple[Any, Any, Any]:
    """(Accuracy, Loss, RunningAverage) of a library."""
    if library == TRACKTRAIN:
        return TTAccuracy, TTLoss, TTRunningAverage
    return IgniteAccuracy, IgniteLoss, IgniteRunningAverage


def attach_classifier_metrics(engine: Any, library: str) -> None:
    """Accuracy and Loss epoch-wise (their default), RunningAverage of the loss with its default usage (updated
    and written to state.metrics every iteration): a typical training-set monitoring setup."""
    accuracy, loss, running_average = metric_classes(library)
    accuracy(output_transform=prediction_and_target).attach(engine, "accuracy")
    loss(F.cross_entropy, output_transform=prediction_and_target).attach(engine, "loss")
    running_average(output_transform=loss_of).attach(engine, "running_loss")


def add_check(variant: Variant, extra: Callable[[int], str | None]) -> None:
    inner = variant.check

    def check(epochs: int) -> str | None:
        return (inner(epochs) if inner is not None else None) or extra(epochs)

    variant.check = check


def add_reset(variant: Variant, extra: Callable[[], None]) -> None:
    inner = variant.reset

    def reset() -> None:
        extra()
        if inner is not None:
            inner()

    variant.reset = reset


def libraries() -> list[tuple[str, Any, Any]]:
    """(name, Engine class, Events) of each library present."""
    found = [(TRACKTRAIN, TTEngine, TTEvents)]
    if ignite is not None:
        found.append((IGNITE, IgniteEngine, IgniteEvents))
    return found


def metrics_case(workload: Workload, epochs: int, warmup_epochs: int) -> Case:
    """g) Accuracy + Loss + RunningAverage on the classifier, against the same engine without them."""
    data, reset = workload.batches, workload.reset
    step = make_classifier_step(workload)
    addon = Addon("+metrics", "Accuracy + Loss (epoch-wise) + RunningAverage of the loss")
    case = Case(
        "tiny-metrics", "tiny classifier: metrics", workload.describe(), len(data), epochs, warmup_epochs, [],
        addons=[addon],
    )
    case.variants.append(raw_classifier_variant(workload))
    last_metrics: dict[str, dict[str, float]] = {}  # per library, state.metrics after its last run

    for library, engine_class, events in libraries():
        bare = engine_variant(library, engine_class(step), events, data, reset)
        bare.profile_target = None  # its profile is the engine's alone: see the tiny-step case
        case.variants.append(bare)

        engine = engine_class(step)
        attach_classifier_metrics(engine, library)
        variant = engine_variant(library + addon.suffix, engine, events, data, reset)
        add_check(variant, metrics_recorder(library, engine, last_metrics))
        case.variants.append(variant)

    case.cross_checks.append(lambda: compare_metrics(last_metrics))
    case.notes.append(
        "Accuracy and Loss(cross_entropy) epoch-wise on (y_pred, y), RunningAverage(output_transform=loss) "
        "with its default usage (updated and written every iteration); Ignite's RunningAverage reads its value with "
        ".item() every iteration, tracktrain's keeps a tensor: on the CPU that sync costs nothing, so the "
        "difference is Python overhead only"
    )
    return case


def metrics_recorder(library: str, engine: Any, into: dict[str, dict[str, float]]) -> Callable[[int], str | None]:
    def record(epochs: int) -> str | None:
        metrics = engine.state.metrics
        missing = [name for name in ("accuracy", "loss", "running_loss") if name not in metrics]
        if missing:
            return f"{library}: metrics {missing} missing from state.metrics after the run ({list(metrics)})"
        into[library] = {name: float(metrics[name]) for name in ("accuracy", "loss", "running_loss")}
        return None

    return record


def compare_metrics(last_metrics: dict[str, dict[str, float]]) -> str | None:
    """Same model, same data, same starting weights: both libraries must compute the same metric values."""
    if TRACKTRAIN not in last_metrics or IGNITE not in last_metrics:
        return None
    ours, theirs = last_metrics[TRACKTRAIN], last_metrics[IGNITE]
    differing = [
        f"{name}: tracktrain {ours[name]!r} vs ignite {theirs[name]!r}"
        for name in ours
        if not math.isclose(ours[name], theirs[name], rel_tol=1e-6, abs_tol=1e-9)
    ]
    return f"metric values differ ({'; '.join(differing)})" if differing else None


class PtySink:
    """A pseudo-terminal for a progress bar to draw on. `file` is the terminal side (a TTY, 120 columns); a
    daemon thread reads the other side and throws the bytes away, so writes never block, and counts them."""

    def __init__(self, columns: int = 120, rows: int = 24) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self.file = open(slave, "w", encoding="utf-8")  # noqa: SIM115 (lives until the process ends)
        self._master = master
        self.bytes_read = 0
        self.carriage_returns = 0  # tqdm starts every redraw with "\r": about the number of draws
        self._run_start = (0, 0)
        threading.Thread(target=self._drain, name="pty-drain", daemon=True).start()
        atexit.register(self.file.close)

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self._master, 1 << 16)
            except OSError:  # EIO once the terminal side is closed
                return
            if not data:
                return
            self.bytes_read += len(data)
            self.carriage_returns += data.count(b"\r")

    def settle(self, quiet_s: float = 0.02, limit_s: float = 2.0) -> tuple[int, int]:
        """Wait (outside any timing) until the reader has caught up; returns (bytes, carriage returns) so far."""
        deadline = time.monotonic() + limit_s
        seen = -1
        while self.bytes_read != seen and time.monotonic() < deadline:
            seen = self.bytes_read
            time.sleep(quiet_s)
        return self.bytes_read, self.carriage_returns

    def begin_run(self) -> None:
        self._run_start = self.settle()

    def written_this_run(self) -> tuple[int, int]:
        """(bytes, carriage returns) read since `begin_run()`."""
        end_bytes, end_returns = self.settle()
        return end_bytes - self._run_start[0], end_returns - self._run_start[1]


def progress_bar_class(library: str) -> Any:
    return TTProgressBar if library == TRACKTRAIN else IgniteProgressBar


def attach_running_loss(engine: Any, library: str) -> None:
    """The one metric the bar shows (present from the first iteration, so no "missing metric" warnings)."""
    metric_classes(library)[2](output_transform=the_output).attach(engine, "running_loss")


def attach_bar(engine: Any, library: str, **tqdm_kwargs: Any) -> None:
    bar = progress_bar_class(library)(**tqdm_kwargs)
    bar.attach(engine, metric_names=["running_loss"], output_transform=batch_loss_postfix)


def pbar_case(workload: Workload, epochs: int, warmup_epochs: int) -> Case:
    """h) ProgressBar on the tiny step, drawing on a pseudo-terminal, and writing to a StringIO with defaults,
    against the same engine (with the metric the bar shows) without a bar."""
    data, reset = workload.batches, workload.reset
    step = make_step(workload)
    on_tty = Addon("+pbar", "ProgressBar on a pseudo-terminal (disable=False, mininterval=0.1)")
    on_stringio = Addon(
        "+pbar-stringio",
        "ProgressBar → io.StringIO, default settings (NOT like for like: tracktrain does not draw on a non-TTY, "
        "ignite does)",
        in_goal=False,
    )
    case = Case(
        "tiny-pbar", "tiny MLP: progress bar", workload.describe(), len(data), epochs, warmup_epochs, [],
        addons=[on_tty, on_stringio],
    )
    case.variants.append(raw_training_variant(workload))
    written: dict[str, str] = {}  # variant -> what its bar wrote in its last run

    for library, engine_class, events in libraries():
        engine = engine_class(step)
        attach_running_loss(engine, library)
        bare = engine_variant(library, engine, events, data, reset)
        bare.profile_target = None
        case.variants.append(bare)

        sink = PtySink()
        engine = engine_class(step)
        attach_running_loss(engine, library)
        attach_bar(engine, library, file=sink.file, disable=False, mininterval=0.1)
        variant = engine_variant(library + on_tty.suffix, engine, events, data, reset)
        add_reset(variant, sink.begin_run)
        add_check(variant, pty_run_check(variant.name, sink, written))
        case.variants.append(variant)

        buffer = io.StringIO()
        engine = engine_class(step)
        attach_running_loss(engine, library)
        attach_bar(engine, library, file=buffer)
        variant = engine_variant(library + on_stringio.suffix, engine, events, data, reset)
        add_reset(variant, lambda buffer=buffer: (buffer.seek(0), buffer.truncate()))
        add_check(variant, stringio_run_check(variant.name, buffer, written))
        case.variants.append(variant)

    case.notes.append(
        "ProgressBar(...).attach(engine, metric_names=['running_loss'], "
        "output_transform=lambda loss: {'batch_loss': loss}); the engine without bar has the same RunningAverage "
        "attached, so the cost is the bar's alone. pty: file=<pseudo-terminal>, disable=False, mininterval=0.1 "
        "for both. StringIO: file=io.StringIO() and nothing else"
    )
    case.late_notes.append(lambda: "bar output in the last run: " + "; ".join(
        f"{name} {text}" for name, text in written.items()
    ))
    return case


def pty_run_check(name: str, sink: PtySink, written: dict[str, str]) -> Callable[[int], str | None]:
    def check(epochs: int) -> str | None:
        size, draws = sink.written_this_run()
        written[name] = f"{size:,} bytes to the pty, ≈{draws:,} redraws"
        if size == 0:
            return f"{name}: the progress bar wrote nothing to the pseudo-terminal, so it did not draw"
        return None

    return check


def stringio_run_check(name: str, buffer: io.StringIO, written: dict[str, str]) -> Callable[[int], str | None]:
    def check(epochs: int) -> str | None:
        text = buffer.getvalue()
        written[name] = f"{len(text):,} characters to the StringIO, ≈{text.count(chr(13)):,} redraws"
        return None

    return check


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
    for cross_check in case.cross_checks:
        problem = cross_check()
        if problem:
            problems.append(f"[{case.key}] {problem}")


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
        "addons": summarize_addons(case, medians, iqrs),
        "notes": case.notes + [note() for note in case.late_notes],
    }


def summarize_addons(case: Case, medians: dict[str, float], iqrs: dict[str, float]) -> list[dict[str, Any]]:
    """Per add-on: each library's cost = (its engine with the add-on) − (the same engine without), the noise
    of those four samples, the ratio tracktrain / ignite and the verdict for the goal (≤ ADDON_GOAL_RATIO)."""
    rows = []
    for addon in case.addons:
        pairs = {
            library: (library, library + addon.suffix)
            for library in (TRACKTRAIN, IGNITE)
            if library in medians and library + addon.suffix in medians
        }
        costs = {library: medians[with_it] - medians[without] for library, (without, with_it) in pairs.items()}
        noise = max(iqrs[name] for pair in pairs.values() for name in pair)
        ratio, goal = None, "n/a"
        if TRACKTRAIN in costs and IGNITE in costs:
            ours, theirs = costs[TRACKTRAIN], costs[IGNITE]
            if theirs > noise:
                ratio = ours / theirs
            # the measured costs decide; "(within noise)" says that this run's spread is wider than the margin
            margin = ADDON_GOAL_RATIO * theirs - ours
            goal = "yes" if margin >= 0 else "NO"
            if abs(margin) <= noise:
                goal += " (within noise)"
        rows.append({
            "suffix": addon.suffix,
            "label": addon.label,
            "in_goal": addon.in_goal,
            "us_per_iter": {name: medians[name] for pair in pairs.values() for name in pair},
            "cost_us_per_iter": costs,
            "noise_us_per_iter": noise,
            "tracktrain_over_ignite_cost": ratio,
            "goal_met": goal,
        })
    return rows


def profile_case(case: Case, threads: int, top: int) -> None:
    """cProfile one run of each engine variant of the case; prints the functions with the most own time.

    In the add-on cases (metrics, progress bar) only the engines with the add-on are profiled, and only the
    functions of that library (and of tqdm) are listed, by cumulative time: the shared training step would
    otherwise fill the list. Their cumulative time includes the torch calls they make.
    """
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
        stats = pstats.Stats(profiler, stream=sys.stdout)
        if case.addons:
            library = TRACKTRAIN if variant.name.startswith(TRACKTRAIN) else IGNITE
            where = rf"[/\\]({library}|tqdm)[/\\]"
            print(f"\n### cProfile: {case.key} / {variant.name} ({case.iterations} iterations), top {top} "
                  f"functions of {library} and tqdm by cumulative time\n")
            print("```")
            stats.sort_stats("cumulative").print_stats(where, top)
        else:
            print(f"\n### cProfile: {case.key} / {variant.name} ({case.iterations} iterations), top {top} by own "
                  "time\n")
            print("```")
            stats.sort_stats("tottime").print_stats(top)
        print("```")


# ------------------------------------------------------------------------------------------------ reporting
fmt = functools.partial(format_cell, decimals=2)  # hundredths: the no-op step's overheads are below 1 µs


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


def addon_table(results: list[dict[str, Any]]) -> str:
    header = [
        "case", "add-on", "iters/run", "raw µs/it", "tracktrain µs/it", "tracktrain + add-on µs/it", "ignite µs/it",
        "ignite + add-on µs/it", "tracktrain add-on cost", "ignite add-on cost", "noise (max IQR)",
        "tt/ignite cost", f"goal ≤ {ADDON_GOAL_RATIO:g}×",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---", "---"] + ["---:"] * (len(header) - 3) + [":---"]) + "|"]
    for result in results:
        for row in result["addons"]:
            medians, costs = row["us_per_iter"], row["cost_us_per_iter"]

            def cost_cell(library: str) -> str:
                if library not in costs:
                    return "not installed"
                return f"{fmt(costs[library], True)} ({costs[library] / medians[library]:+.1%})"

            ratio = row["tracktrain_over_ignite_cost"]
            lines.append("| " + " | ".join([
                f"{result['title']} [{result['key']}]",
                row["label"],
                str(result["iterations_per_run"]),
                fmt(result["us_per_iter"][RAW]),
                fmt(medians.get(TRACKTRAIN)),
                fmt(medians.get(TRACKTRAIN + row["suffix"])),
                fmt(medians[IGNITE]) if IGNITE in medians else "not installed",
                fmt(medians[IGNITE + row["suffix"]]) if IGNITE in medians else "not installed",
                cost_cell(TRACKTRAIN),
                cost_cell(IGNITE),
                fmt(row["noise_us_per_iter"]),
                "—" if ratio is None else f"{ratio:.2f}",
                row["goal_met"] if row["in_goal"] else f"({row['goal_met']}; not counted)",
            ]) + " |")
    return "\n".join(lines)


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
        help="comma-separated case keys or prefixes: tiny, medium, noop, tiny-step, tiny-metrics, tiny-pbar, "
        "noop-handlers, ... (default all)",
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
    tiny_warmup_epochs = max(1, tiny_epochs // 5)
    tiny = Workload((32, 32, 1), 64, tiny_batches, seed=args.seed)
    if any(selected(f"tiny-{kind}", args.cases) for kind in ("step", "supervised", "handlers")):
        cases += training_cases(
            "tiny", "tiny MLP", tiny, tiny_epochs, tiny_warmup_epochs, lightning, args.lightning_iters, root_dir,
        )
    if selected("tiny-metrics", args.cases):
        classifier = Workload((32, 32, 10), 64, tiny_batches, seed=args.seed, classify=True)
        cases.append(metrics_case(classifier, tiny_epochs, tiny_warmup_epochs))
    if selected("tiny-pbar", args.cases):
        cases.append(pbar_case(tiny, tiny_epochs, tiny_warmup_epochs))
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

    env = environment(torch.get_num_threads(), ignite=ignite.__version__ if ignite is not None else IGNITE_MISSING)
    print_heading(
        "tracktrain Engine overhead per iteration", env, args.threads,
        f"ignite {env['ignite']}, lightning {lightning_status}", f"{args.repeats} interleaved repeats per case",
        args.stat, args.quick,
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

    engine_results = [result for result in results if not result["addons"]]
    addon_results = [result for result in results if result["addons"]]
    if engine_results:
        report_engine_results(engine_results, args.stat)
    if addon_results:
        report_addon_results(addon_results, args.stat)

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
        write_json(args.json, payload)
    return exit_status(problems)


def report_engine_results(results: list[dict[str, Any]], stat: str) -> None:
    has_lightning = any(LIGHTNING in result["us_per_iter"] for result in results)
    print("\n" + markdown_table(results, has_lightning) + "\n")
    print(
        f"µs/it: {stat} over the repeats of (time of a run / its iterations). overhead: variant − raw "
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
        print(goal_line(
            f"Goal (tracktrain overhead ≤ {GOAL_RATIO} × ignite's)", verdicts, unit="cases", unclear="below noise",
            unclear_label="overheads below noise in",
        ))


def report_addon_results(results: list[dict[str, Any]], stat: str) -> None:
    print("\n## Metrics and progress bar: cost per iteration over the same engine without them\n")
    print(addon_table(results) + "\n")
    print(
        f"µs/it: {stat} over the repeats, as above. add-on cost: (engine with the add-on) − (the same engine without "
        "it), in µs per iteration and as a share of the engine without it. noise: the largest interquartile range "
        "of those four samples. tt/ignite cost: given only where ignite's cost exceeds the noise. goal: "
        f"tracktrain's cost ≤ {ADDON_GOAL_RATIO:g} × ignite's, as measured; '(within noise)' where the margin, "
        "either way, is smaller than the noise, so another run may say otherwise. Rows marked 'not counted' are "
        "reported but not like for like, so they do not count for the goal."
    )
    for result in results:
        for note in result["notes"]:
            print(f"- {result['title']}: {note}")
    if ignite is None:
        print(f"\nignite: {IGNITE_MISSING}; the goal cannot be checked.")
        return
    rows = [(f"{result['key']} {row['suffix']}", row["goal_met"]) for result in results for row in result["addons"]
            if row["in_goal"]]
    print(goal_line(f"Goal (tracktrain's metrics / progress bar cost ≤ {ADDON_GOAL_RATIO:g} × ignite's)", rows))


if __name__ == "__main__":
    sys.exit(main())
