"""The cases `bench_engine_overhead.py` times: the workloads (a model, its optimizer and pre-built batches), the
variants that run them (a raw loop, tracktrain's and Ignite's Engine, Lightning's Trainer) and the 10 handlers. Each
variant is a `body(epochs)` the script times, with a `reset` before and a `check` after every run."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from workloads import load_peer, make_mlp, mlp_name

from tracktrain.engine import Engine as TTEngine
from tracktrain.engine import Events as TTEvents
from tracktrain.engine import create_supervised_trainer as tt_create_supervised_trainer

ignite, IGNITE_STATUS = load_peer("ignite", "ignite.engine", "ignite.handlers", "ignite.metrics")
if ignite is not None:
    from ignite.engine import Engine as IgniteEngine
    from ignite.engine import Events as IgniteEvents
    from ignite.engine import create_supervised_trainer as ignite_create_supervised_trainer

RAW, TRACKTRAIN, IGNITE, LIGHTNING = "raw", "tracktrain", "ignite", "lightning"


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
        return f"{mlp_name(self.sizes)}{task}, batch {self.batch_size}, {len(self.batches)} batches/epoch"


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
            for _batch in batches:
                pass

    return Variant(RAW, body)


def engine_variant(name: str, engine: Any, events: Any, data: list[Any], reset: Callable[[], None] | None) -> Variant:
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
    prefix: str,
    label: str,
    workload: Workload,
    epochs: int,
    warmup_epochs: int,
    lightning: Any,
    lightning_iterations: int,
    root_dir: str,
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
        f"{prefix}-supervised",
        f"{label}: create_supervised_trainer",
        workload.describe(),
        len(data),
        epochs,
        warmup_epochs,
        [],
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
        f"{prefix}-handlers",
        f"{label}: hand-written step + 10 handlers",
        workload.describe(),
        len(data),
        epochs,
        warmup_epochs,
        [],
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
