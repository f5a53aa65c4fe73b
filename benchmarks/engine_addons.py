"""The add-on cases of `bench_engine_overhead.py`: what metrics and a progress bar cost on top of each library's
engine, measured as (the engine with them) − (the same engine without them). The bar draws on a real
pseudo-terminal (`PtySink`)."""

from __future__ import annotations

import atexit
import fcntl
import math
import os
import pty
import struct
import termios
import threading
import time
from typing import Any

import torch
import torch.nn.functional as F
from engine_cases import IGNITE, RAW, TRACKTRAIN, Case, Variant, Workload, engine_variant, engines, ignite, raw_variant

from tracktrain.handlers import ProgressBar as TTProgressBar
from tracktrain.metrics import Accuracy as TTAccuracy
from tracktrain.metrics import Loss as TTLoss
from tracktrain.metrics import RunningAverage as TTRunningAverage

METRICS = {TRACKTRAIN: (TTAccuracy, TTLoss, TTRunningAverage)}  # (Accuracy, Loss, RunningAverage) of each library
BARS = {TRACKTRAIN: TTProgressBar}
if ignite is not None:
    METRICS[IGNITE] = (ignite.metrics.Accuracy, ignite.metrics.Loss, ignite.metrics.RunningAverage)
    BARS[IGNITE] = ignite.handlers.ProgressBar
METRIC_NAMES = ("accuracy", "loss", "running_loss")


def classifier_step(workload: Workload) -> Any:
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

    return Variant(RAW, body, [workload.reset])


# The same output_transforms for both libraries (module-level functions, so neither pays for a closure).
def prediction_and_target(output: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    return output[0], output[1]


def loss_of(output: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return output[2]


def the_output(output: Any) -> Any:
    return output


def batch_loss_postfix(output: Any) -> dict[str, Any]:
    return {"batch_loss": output}


def metrics_case(workload: Workload, epochs: int, warmup_epochs: int) -> Case:
    """Accuracy and Loss epoch-wise (their default), RunningAverage of the loss with its default usage (updated and
    written to state.metrics every iteration) on the classifier, against the same engine without them. After each
    round both libraries must have computed the same values (same weights, data and arithmetic)."""
    data, reset, step = workload.batches, workload.reset, classifier_step(workload)
    case = Case("tiny-metrics", workload.describe(), len(data), epochs, warmup_epochs, addons=("+metrics",))
    case.variants.append(raw_classifier_variant(workload))
    last: dict[str, dict[str, float]] = {}  # per library, state.metrics after its last run
    for library, engine_class, events in engines():
        case.variants.append(engine_variant(library, engine_class(step), events, data, reset))
        engine = engine_class(step)
        accuracy, loss, running_average = METRICS[library]
        accuracy(output_transform=prediction_and_target).attach(engine, "accuracy")
        loss(F.cross_entropy, output_transform=prediction_and_target).attach(engine, "loss")
        running_average(output_transform=loss_of).attach(engine, "running_loss")
        variant = engine_variant(library + "+metrics", engine, events, data, reset)

        def record(epochs: int, library: str = library, engine: Any = engine) -> str | None:
            missing = [name for name in METRIC_NAMES if name not in engine.state.metrics]
            if missing:
                return f"{library}: metrics {missing} missing from state.metrics after the run"
            last[library] = {name: float(engine.state.metrics[name]) for name in METRIC_NAMES}
            return None

        variant.checks.append(record)
        case.variants.append(variant)

    def same_metrics() -> str | None:
        if len(last) < 2:
            return None
        ours, theirs = last[TRACKTRAIN], last[IGNITE]
        differing = [
            f"{name}: tracktrain {ours[name]!r} vs ignite {theirs[name]!r}"
            for name in ours
            if not math.isclose(ours[name], theirs[name], rel_tol=1e-6, abs_tol=1e-9)
        ]
        return f"metric values differ ({'; '.join(differing)})" if differing else None

    case.round_checks.append(same_metrics)
    case.notes.append(
        lambda: (
            "Accuracy and Loss(cross_entropy) epoch-wise on (y_pred, y), RunningAverage(output_transform=loss) "
            "with its default usage (updated and written every iteration); Ignite's RunningAverage reads its value with "
            ".item() every iteration, tracktrain's keeps a tensor: on the CPU that sync costs nothing, so the "
            "difference is Python overhead only"
        )
    )
    return case


class PtySink:
    """A pseudo-terminal for a progress bar to draw on. `file` is the terminal side (a TTY, 120 columns); a daemon
    thread reads the other side and throws the bytes away, so writes never block, counting them and the "\\r" that
    starts each of tqdm's redraws."""

    def __init__(self, columns: int = 120, rows: int = 24) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self.file = open(slave, "w", encoding="utf-8")  # noqa: SIM115 (lives until the process ends)
        self._master = master
        self.bytes_read = self.carriage_returns = 0
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
        """Waits (outside any timing) until the reader has caught up: (bytes, carriage returns) so far."""
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


def pbar_case(workload: Workload, epochs: int, warmup_epochs: int) -> Case:
    """A ProgressBar on the tiny step drawing on a pseudo-terminal (disable=False, mininterval=0.1 for both), against
    the same engine without a bar; both engines have the RunningAverage the bar shows, so the cost is the bar's alone.
    Each bar must write something in every run."""
    data, reset, step = workload.batches, workload.reset, workload.step
    case = Case("tiny-pbar", workload.describe(), len(data), epochs, warmup_epochs, addons=("+pbar",))
    case.variants.append(raw_variant(workload))
    written: dict[str, str] = {}  # variant -> what its bar wrote in its last run
    for library, engine_class, events in engines():
        for with_bar in (False, True):
            engine = engine_class(step)
            METRICS[library][2](output_transform=the_output).attach(engine, "running_loss")
            name = library + ("+pbar" if with_bar else "")
            variant = engine_variant(name, engine, events, data, reset)
            if with_bar:
                sink = PtySink()
                bar = BARS[library](file=sink.file, disable=False, mininterval=0.1)
                bar.attach(engine, metric_names=["running_loss"], output_transform=batch_loss_postfix)

                def check(epochs: int, name: str = name, sink: PtySink = sink) -> str | None:
                    size, draws = sink.written_this_run()
                    written[name] = f"{size:,} bytes to the pty, ≈{draws:,} redraws"
                    return None if size else f"{name}: the progress bar wrote nothing to the pseudo-terminal"

                variant.resets.append(sink.begin_run)
                variant.checks.append(check)
            case.variants.append(variant)
    case.notes += [
        lambda: (
            "ProgressBar(file=<pseudo-terminal>, disable=False, mininterval=0.1).attach(engine, "
            "metric_names=['running_loss'], output_transform=lambda loss: {'batch_loss': loss}); the engine without bar "
            "has the same RunningAverage attached, so the cost is the bar's alone"
        ),
        lambda: "bar output in the last run: " + "; ".join(f"{name} {text}" for name, text in written.items()),
    ]
    return case
