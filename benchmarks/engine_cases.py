"""The cases `bench_engine_overhead.py` times: the workloads (a model, its optimizer and pre-built batches), the
variants that run them (a raw loop, tracktrain's and Ignite's Engine, Lightning's Trainer) and the 10 handlers. Each
variant is a `body(epochs)` the script times, with its resets before and its checks after every run."""

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
KINDS = ("step", "supervised", "handlers")  # the training cases: tiny-step, ...


class Workload:
    """One model, its optimizer and its batches (random inputs; random values, or class indices with `classify`),
    shared by all the variants of a case. `reset()` puts the initial weights back before every timed run, so that
    each variant, in each repeat, does the same arithmetic on the same numbers (SGD keeps no state of its own)."""

    def __init__(self, sizes: tuple[int, ...], batch_size: int, n_batches: int, seed: int, classify: bool = False):
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed + 1)
        self.sizes, self.batch_size, self.classify = sizes, batch_size, classify
        self.model = make_mlp(sizes)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        self.batches = [
            (
                torch.randn(batch_size, sizes[0], generator=generator),
                torch.randint(0, sizes[-1], (batch_size,), generator=generator)
                if classify
                else torch.randn(batch_size, sizes[-1], generator=generator),
            )
            for _ in range(n_batches)
        ]
        self._initial = {name: value.clone() for name, value in self.model.state_dict().items()}

    def reset(self) -> None:
        self.model.load_state_dict(self._initial)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)

    def describe(self) -> str:
        task = f", {self.sizes[-1]} classes, cross-entropy" if self.classify else ""
        return f"{mlp_name(self.sizes)}{task}, batch {self.batch_size}, {len(self.batches)} batches/epoch"

    def step(self, engine: Any, batch: Any) -> torch.Tensor:
        """The hand-written process function the engines share: the MSE step, returning the detached loss."""
        x, y = batch
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        return loss.detach()


def noop_step(engine: Any, batch: Any) -> Any:
    return batch


def detached_loss(x: Any, y: Any, y_pred: Any, loss: torch.Tensor) -> torch.Tensor:
    """The output_transform given to both create_supervised_trainer (Ignite's own default calls .item())."""
    return loss.detach()


@dataclass
class Variant:
    """`body(epochs)` runs `epochs` epochs. It returns None to be timed from outside, or `(seconds, iterations)`
    when it times itself (Lightning, whose fit() has a long start-up that is not per-iteration overhead). Before
    each run its `resets` run, after it its `checks(epochs)`, each returning a problem or None; all outside the
    timing."""

    name: str
    body: Callable[[int], tuple[float, int] | None]
    resets: list[Callable[[], Any]] = field(default_factory=list)
    checks: list[Callable[[int], str | None]] = field(default_factory=list)


@dataclass
class Case:
    """The variants of one comparison. In an add-on case (metrics, a progress bar) what is compared is each engine
    with the add-on (named `<engine><suffix>`, a suffix of `addons`) against the same engine alone. `round_checks` compare the variants after each round; `notes` are printed under the table."""

    key: str
    detail: str
    batches_per_epoch: int
    epochs: int
    warmup_epochs: int
    variants: list[Variant] = field(default_factory=list)
    addons: tuple[str, ...] = ()
    round_checks: list[Callable[[], str | None]] = field(default_factory=list)
    notes: list[Callable[[], str]] = field(default_factory=list)

    @property
    def iterations(self) -> int:
        return self.batches_per_epoch * self.epochs


def engines() -> list[tuple[str, Any, Any]]:
    """(name, Engine class, Events) of each library present."""
    return [(TRACKTRAIN, TTEngine, TTEvents)] + ([(IGNITE, IgniteEngine, IgniteEvents)] if ignite is not None else [])


def raw_variant(workload: Workload) -> Variant:
    """The MSE step written inline in a `for epoch: for x, y in batches:` loop: the engines' work, minus the engine."""
    model, optimizer, batches = workload.model, workload.optimizer, workload.batches

    def body(epochs: int) -> None:
        for _ in range(epochs):
            for x, y in batches:
                optimizer.zero_grad()
                loss = F.mse_loss(model(x), y)
                loss.backward()
                optimizer.step()
                output = loss.detach()  # the engines' step returns this too
        del output

    return Variant(RAW, body, [workload.reset])


def raw_noop_variant(batches: list[Any]) -> Variant:
    def body(epochs: int) -> None:
        for _ in range(epochs):
            for _batch in batches:
                pass

    return Variant(RAW, body)


def engine_variant(name: str, engine: Any, events: Any, data: list[Any], reset: Callable[[], None] | None) -> Variant:
    """`engine.run(data, max_epochs=epochs)`, each time as a new run: a finished engine given a larger max_epochs
    would extend its last run instead (Ignite's semantics), so `state.max_epochs` is cleared before every run. A
    STARTED handler (one call per run) records the counters at the start, which proves the run started from zero."""
    started_at: list[tuple[int, int]] = []
    engine.add_event_handler(
        events.STARTED, lambda engine: started_at.append((engine.state.epoch, engine.state.iteration))
    )

    def before_run() -> None:
        engine.state.max_epochs = None
        started_at.clear()

    def check(epochs: int) -> str | None:
        if started_at != [(0, 0)]:
            return f"{name}: the run did not start afresh (epoch, iteration at STARTED: {started_at})"
        if engine.state.iteration != epochs * len(data) or engine.state.epoch != epochs:
            return (
                f"{name}: ran {engine.state.iteration} iterations / {engine.state.epoch} epochs, "
                f"expected {epochs * len(data)} / {epochs}"
            )
        return None

    def body(epochs: int) -> None:
        engine.run(data, max_epochs=epochs)

    return Variant(name, body, [before_run, *([reset] if reset else [])], [check])


# Handlers for the "10 handlers" cases. Each does trivial work: one increment in a list of counters.
def count_with_engine(engine: Any, counts: list[int], index: int) -> None:
    counts[index] += 1


def count_without_engine(counts: list[int], index: int) -> None:
    counts[index] += 1


def every_13th_after_20(engine: Any, event: int) -> bool:
    """A custom event_filter."""
    return event > 20 and event % 13 == 0


def handlers_variants(case: Case, step: Any, data: list[Any], reset: Callable[[], None] | None) -> list[Variant]:
    """Each engine with the same 10 handlers: per iteration 7 filters are evaluated and few handlers actually run, as
    with typical logging, checkpointing and validation handlers. After each round the engines' counts must agree."""
    counts: dict[str, list[int]] = {}
    variants = []
    for name, engine_class, events in engines():
        engine, counts[name] = engine_class(step), [0] * 10
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
        for index, (event, handler) in enumerate(plan):
            engine.add_event_handler(event, handler, counts[name], index)
        variant = engine_variant(name, engine, events, data, reset)
        variant.resets.append(lambda counts=counts[name]: counts.__setitem__(slice(None), [0] * 10))
        variants.append(variant)

    def same_counts() -> str | None:
        if len(counts) == 2 and counts[TRACKTRAIN] != counts[IGNITE]:
            return f"handler call counts differ: tracktrain {counts[TRACKTRAIN]} vs ignite {counts[IGNITE]}"
        return None

    case.round_checks.append(same_counts)
    return variants


def lightning_variant(lp: Any, workload: Workload, max_iterations: int, root_dir: str) -> Variant:
    """Trainer.fit in barebones mode (no logger, checkpoint, progress bar or summary) with the same step. fit() spends
    a long time starting up, which is not per-iteration overhead: a callback reads the clock at the end of every batch,
    and the time from the end of batch `skip` to the end of the last one is divided by the batches in between. At most
    `max_iterations` run per repeat (Lightning is slow)."""
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

        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.done += 1
            self.end = time.perf_counter()
            if self.done == self.skip:
                self.start = self.end

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

    return Variant(LIGHTNING, body, [workload.reset])


# -------------------------------------------------------------------------------------------------- cases
def training_cases(
    workload: Workload, epochs: int, warmup_epochs: int, lightning: Any, lightning_iterations: int, root_dir: str
) -> list[Case]:
    """The tiny MLP's hand-written step run by each engine (and Lightning), each library's create_supervised_trainer
    (same output_transform), and the step with 10 handlers on filtered events; each next to the raw loop."""
    data, reset, step = workload.batches, workload.reset, workload.step
    cases = [Case(f"tiny-{kind}", workload.describe(), len(data), epochs, warmup_epochs) for kind in KINDS]
    step_case, supervised, handlers = cases
    step_case.variants += [
        engine_variant(name, engine(step), events, data, reset) for name, engine, events in engines()
    ]
    if lightning is not None:
        step_case.variants.append(lightning_variant(lightning, workload, lightning_iterations, root_dir))
        step_case.notes.append(
            lambda: (
                "lightning: Trainer(barebones=True).fit, steady state only (batches after the first few), "
                f"at most {lightning_iterations} iterations per repeat"
            )
        )
    model, optimizer = workload.model, workload.optimizer
    trainers = [(TRACKTRAIN, tt_create_supervised_trainer, TTEvents)]
    if ignite is not None:
        trainers.append((IGNITE, ignite_create_supervised_trainer, IgniteEvents))
    for name, create, events in trainers:
        trainer = create(model, optimizer, F.mse_loss, output_transform=detached_loss)
        supervised.variants.append(engine_variant(name, trainer, events, data, reset))
    handlers.variants += handlers_variants(handlers, step, data, reset)
    for case in cases:
        case.variants.insert(0, raw_variant(workload))
    return cases


def noop_cases(batches: list[Any], epochs: int, warmup_epochs: int) -> list[Case]:
    """A process function that returns the batch: the loop's own cost, and the cost of 10 handlers."""
    detail = f"process_function returns the batch, {len(batches)} batches/epoch"
    noop, handlers = (Case(key, detail, len(batches), epochs, warmup_epochs) for key in ("noop", "noop-handlers"))
    noop.variants = [raw_noop_variant(batches)]
    noop.variants += [
        engine_variant(name, engine(noop_step), events, batches, None) for name, engine, events in engines()
    ]
    handlers.variants = [raw_noop_variant(batches), *handlers_variants(handlers, noop_step, batches, None)]
    return [noop, handlers]
