"""Where a metric's state lives: by default (device=None) on the device of the first update's inputs after each
reset(), so that updates never copy across devices; an explicit device= always wins.

The CPU cannot show a CUDA sync, so the "follows the inputs" cases use the meta device (tensors without data, on
which the update arithmetic runs); on a CUDA machine the same is checked for real with
`torch.cuda.set_sync_debug_mode("error")`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tracktrain.metrics import (
    Accuracy,
    Average,
    Loss,
    MeanAbsoluteError,
    MeanSquaredError,
    Metric,
    RunningAverage,
    TopKCategoricalAccuracy,
)


def scores(device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(8, 4, generator=g).to(device), torch.randint(0, 4, (8,), generator=g).to(device)


def zero_one(device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 2, (8,), generator=g).to(device), torch.randint(0, 2, (8,), generator=g).to(device)


def regression(device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    return torch.randn(8, 1, generator=g).to(device), torch.randn(8, generator=g).to(device)


CASES: dict[str, tuple[Callable[..., Metric], Callable[[Any], Any]]] = {
    "accuracy-multiclass": (Accuracy, scores),
    "accuracy-binary": (Accuracy, zero_one),
    "top-k": (lambda **kw: TopKCategoricalAccuracy(k=2, **kw), scores),
    "loss": (lambda **kw: Loss(F.cross_entropy, **kw), scores),
    "mse": (MeanSquaredError, regression),
    "mae": (MeanAbsoluteError, regression),
    "average-batch": (Average, lambda device: regression(device)[0]),
    "average-scalar-tensor": (Average, lambda device: torch.tensor(2.5, device=device)),
}


def state_devices(metric: Metric) -> set[torch.device]:
    return {value.device for value in vars(metric).values() if isinstance(value, torch.Tensor)}


@pytest.mark.parametrize(
    "metric_class",
    [Accuracy, TopKCategoricalAccuracy, Loss, MeanSquaredError, MeanAbsoluteError, Average, RunningAverage, Metric],
)
def test_the_default_device_is_none(metric_class):
    assert inspect.signature(metric_class.__init__).parameters["device"].default is None


@pytest.mark.parametrize("case", sorted(CASES))
def test_by_default_the_state_lives_on_the_inputs_device(case):
    make_metric, make_output = CASES[case]
    metric = make_metric()
    metric.update(make_output("cpu"))
    assert state_devices(metric) == {torch.device("cpu")}

    metric.reset()
    metric.update(make_output("meta"))  # the inputs' device, whatever it is
    assert state_devices(metric) == {torch.device("meta")}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_reset_settles_the_device_again(case):
    make_metric, make_output = CASES[case]
    metric = make_metric()
    metric.update(make_output("meta"))
    metric.reset()
    for _ in range(2):
        metric.update(make_output("cpu"))
    assert state_devices(metric) == {torch.device("cpu")}
    reference = make_metric(device="cpu")
    for _ in range(2):
        reference.update(make_output("cpu"))
    assert metric.compute() == pytest.approx(reference.compute())


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_explicit_device_wins_over_the_inputs_device(case):
    make_metric, make_output = CASES[case]
    metric = make_metric(device="meta")
    assert state_devices(metric) == {torch.device("meta")}  # allocated at once, before any update
    metric.update(make_output("cpu"))
    assert state_devices(metric) == {torch.device("meta")}


def test_numbers_then_tensors_keep_what_the_numbers_added():
    average = Average()
    average.update(1.0)
    average.update(torch.tensor(5.0))
    assert average.compute() == 3.0


# ---------------------------------------------------------------------------------------------------------- CUDA
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("case", sorted(CASES))
def test_default_metrics_on_cuda_inputs_never_synchronize_in_update(case):
    make_metric, make_output = CASES[case]
    metric = make_metric()  # device=None: no device given
    outputs = [make_output("cuda") for _ in range(3)]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for output in outputs:
            metric.update(output)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert {device.type for device in state_devices(metric)} == {"cuda"}

    reference = make_metric(device="cpu")
    for output in outputs:
        reference.update(tuple(t.cpu() for t in output) if isinstance(output, tuple) else output.cpu())
    value, expected = metric.compute(), reference.compute()
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(value.cpu(), expected)
    else:
        assert value == pytest.approx(expected)
