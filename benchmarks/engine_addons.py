"""The add-on cases of `bench_engine_overhead.py`: what metrics and a progress bar cost on top of each library's
engine, measured as (the engine with them) − (the same engine without them). The bar draws on a real
pseudo-terminal (`PtySink`) or writes to a StringIO."""

from __future__ import annotations

import atexit
import fcntl
import io
import math
import os
import pty
import struct
import termios
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from engine_cases import (
    IGNITE,
    RAW,
    TRACKTRAIN,
    Addon,
    Case,
    TTEngine,
    TTEvents,
    Variant,
    Workload,
    engine_variant,
    ignite,
    make_step,
    raw_training_variant,
)

from tracktrain.handlers import ProgressBar as TTProgressBar
from tracktrain.metrics import Accuracy as TTAccuracy
from tracktrain.metrics import Loss as TTLoss
from tracktrain.metrics import RunningAverage as TTRunningAverage

if ignite is not None:
    from ignite.engine import Engine as IgniteEngine
    from ignite.engine import Events as IgniteEvents
    from ignite.handlers import ProgressBar as IgniteProgressBar
    from ignite.metrics import Accuracy as IgniteAccuracy
    from ignite.metrics import Loss as IgniteLoss
    from ignite.metrics import RunningAverage as IgniteRunningAverage


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
        "tiny-metrics",
        "tiny classifier: metrics",
        workload.describe(),
        len(data),
        epochs,
        warmup_epochs,
        [],
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
        "tiny-pbar",
        "tiny MLP: progress bar",
        workload.describe(),
        len(data),
        epochs,
        warmup_epochs,
        [],
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
    case.late_notes.append(
        lambda: "bar output in the last run: " + "; ".join(f"{name} {text}" for name, text in written.items())
    )
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
