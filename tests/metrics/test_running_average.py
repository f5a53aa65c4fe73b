"""RunningAverage against a hand-computed exponential moving average, on an Engine and by hand."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tracktrain.engine import Engine, Events
from tracktrain.metrics import Accuracy, RunningAverage, RunningEpochWise
from tracktrain.metrics.metric import NotComputableError

ALPHA = 0.9


def ema(values: list[float], alpha: float = ALPHA) -> list[float]:
    """The running values after each of `values`: the first as is, then alpha * previous + (1 - alpha) * value."""
    running: list[float] = []
    for value in values:
        running.append(value if not running else alpha * running[-1] + (1 - alpha) * value)
    return running


def per_iteration(engine: Engine, name: str) -> list[Any]:
    values: list[Any] = []
    engine.add_event_handler(Events.ITERATION_COMPLETED, lambda e: values.append(e.state.metrics[name]))
    return values


LOSSES = [4.0, 2.0, 7.0, 1.0]


def loss_engine() -> Engine:
    """Outputs a 0-dim loss tensor; epoch e adds 10 * (e - 1) so that epochs differ."""
    return Engine(lambda e, b: torch.tensor(b + 10.0 * (e.state.epoch - 1)))


def test_running_average_of_the_output_runs_across_epochs():
    engine = loss_engine()
    RunningAverage(alpha=ALPHA, output_transform=lambda loss: loss).attach(engine, "loss")
    values = per_iteration(engine, "loss")
    engine.run(LOSSES, max_epochs=2)
    outputs = LOSSES + [v + 10 for v in LOSSES]
    # the running value stays a tensor: no host sync per iteration
    assert all(isinstance(v, torch.Tensor) and v.ndim == 0 for v in values)
    assert [float(v) for v in values] == pytest.approx(ema(outputs))


@pytest.mark.parametrize("how", ["epoch_bound", "usage"])
def test_running_average_bound_to_the_epoch_restarts_each_epoch(how):
    engine = loss_engine()
    if how == "epoch_bound":
        RunningAverage(alpha=ALPHA, output_transform=lambda loss: loss, epoch_bound=True).attach(engine, "loss")
    else:
        RunningAverage(alpha=ALPHA, output_transform=lambda loss: loss).attach(
            engine, "loss", usage="single_epoch_running_batch_wise"
        )
    values = per_iteration(engine, "loss")
    engine.run(LOSSES, max_epochs=2)
    assert [float(v) for v in values] == pytest.approx(ema(LOSSES) + ema([v + 10 for v in LOSSES]))


def test_epoch_bound_false_runs_across_epochs_whatever_the_usage():
    engine = loss_engine()
    RunningAverage(alpha=ALPHA, output_transform=lambda loss: loss, epoch_bound=False).attach(
        engine, "loss", usage="single_epoch_running_batch_wise"
    )
    values = per_iteration(engine, "loss")
    engine.run(LOSSES, max_epochs=2)
    assert [float(v) for v in values] == pytest.approx(ema(LOSSES + [v + 10 for v in LOSSES]))


def test_running_average_of_numbers_stays_a_number():
    running = RunningAverage(alpha=0.5, output_transform=lambda x: x)
    for value in (2.0, 4.0, 0.0):
        running.update(value)
    assert running.compute() == pytest.approx(1.5)


def test_running_average_of_vectors():
    running = RunningAverage(alpha=0.5, output_transform=lambda x: x)
    running.update(torch.tensor([2.0, 0.0]))
    running.update(torch.tensor([0.0, 4.0]))
    torch.testing.assert_close(running.compute(), torch.tensor([1.0, 2.0]))


def test_running_value_does_not_follow_a_reused_output_tensor():
    running = RunningAverage(output_transform=lambda x: x)
    buffer = torch.tensor(1.0)
    running.update(buffer)
    buffer.fill_(100.0)
    assert float(running.compute()) == 1.0


def test_half_precision_outputs_are_averaged_in_float32():
    running = RunningAverage(alpha=0.999, output_transform=lambda x: x)
    running.update(torch.tensor(1.0, dtype=torch.bfloat16))
    running.update(torch.tensor(2.0, dtype=torch.bfloat16))
    value = running.compute()
    assert value.dtype == torch.float32
    assert float(value) == pytest.approx(1.001)  # bfloat16 would round this back to 1.0


def test_running_value_moves_to_the_given_device():
    running = RunningAverage(output_transform=lambda x: x, device="meta")
    running.update(torch.tensor(1.0))
    assert running.compute().device.type == "meta"


def batches_of_known_accuracy() -> tuple[list[tuple[torch.Tensor, torch.Tensor]], list[float]]:
    g = torch.Generator().manual_seed(5)
    batches = [(torch.randn(n, 3, generator=g), torch.randint(0, 3, (n,), generator=g)) for n in (6, 10, 3, 8)]
    accuracies = [(b[0].argmax(1) == b[1]).float().mean().item() for b in batches]
    return batches, accuracies


def test_running_average_of_a_metric_computes_and_resets_it_every_iteration():
    batches, accuracies = batches_of_known_accuracy()
    engine = Engine(lambda e, b: b)
    RunningAverage(Accuracy(), alpha=ALPHA).attach(engine, "running_acc")
    values = per_iteration(engine, "running_acc")
    engine.run(batches, max_epochs=2)
    assert values == pytest.approx(ema(accuracies * 2))
    assert all(type(v) is float for v in values)


def test_running_average_of_a_metric_per_epoch():
    batches, _ = batches_of_known_accuracy()
    engine = Engine(lambda e, b: (b[0], (b[1] + e.state.epoch - 1) % 3))  # epochs differ
    RunningAverage(Accuracy(), alpha=ALPHA).attach(engine, "running_acc", usage=RunningEpochWise())
    epoch_values: list[float] = []
    engine.add_event_handler(Events.EPOCH_COMPLETED, lambda e: epoch_values.append(e.state.metrics["running_acc"]))
    engine.run(batches, max_epochs=3)
    per_epoch = []
    for epoch in range(3):
        y_pred = torch.cat([b[0] for b in batches]).argmax(1)
        y = (torch.cat([b[1] for b in batches]) + epoch) % 3
        per_epoch.append((y_pred == y).float().mean().item())
    assert epoch_values == pytest.approx(ema(per_epoch))


def test_attach_detach_and_is_attached():
    source = Accuracy()
    running = RunningAverage(source)
    engine = Engine(lambda e, b: b)
    running.attach(engine, "running")
    assert running.is_attached(engine)
    assert engine.has_event_handler(source.iteration_completed, Events.ITERATION_COMPLETED)
    running.detach(engine)
    assert not running.is_attached(engine)
    assert not engine.has_event_handler(source.iteration_completed)
    assert not engine.has_event_handler(running.iteration_completed)
    engine.run([(torch.randn(2, 3), torch.tensor([0, 1]))])
    assert "running" not in engine.state.metrics


def test_compute_before_update():
    with pytest.raises(NotComputableError, match="RunningAverage has no value before its first update"):
        RunningAverage(output_transform=lambda x: x).compute()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"src": 3}, TypeError, "Argument src should be a Metric or None. RunningAverage got src=3"),
        (
            {"src": Accuracy(), "alpha": 0.0},
            ValueError,
            r"Argument alpha should be a float between 0.0 and 1.0. RunningAverage got alpha=0.0",
        ),
        ({"src": Accuracy(), "alpha": 1.5}, ValueError, r"alpha=1.5"),
        (
            {"src": Accuracy(), "output_transform": lambda x: x},
            ValueError,
            "Argument output_transform should be None if src is a Metric",
        ),
        ({"src": Accuracy(), "device": "cpu"}, ValueError, "Argument device should be None if src is a Metric"),
        ({}, ValueError, "needs src .* or output_transform"),
        ({"output_transform": lambda x: x, "epoch_bound": "yes"}, TypeError, "epoch_bound must be None, True or False"),
    ],
)
def test_arguments_are_checked(kwargs, error, message):
    with pytest.raises(error, match=message):
        RunningAverage(**kwargs)


def test_output_must_be_a_number_or_a_tensor():
    with pytest.raises(TypeError, match="averages a number or a tensor, got str"):
        RunningAverage(output_transform=lambda x: x).update("1.0")
