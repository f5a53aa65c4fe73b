"""Differential tests: tracktrain's metrics against ignite.metrics, the oracle, on the same random data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import tracktrain.metrics as ours
from tracktrain.engine import Engine, Events

ignite_metrics = pytest.importorskip("ignite.metrics")
ignite_engine = pytest.importorskip("ignite.engine")

SIZES = (16, 5, 32, 1, 9)


def batches(make: Callable[[torch.Generator, int], Any], seed: int = 0) -> list[Any]:
    g = torch.Generator().manual_seed(seed)
    return [make(g, n) for n in SIZES]


def multiclass(g: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, 6, generator=g), torch.randint(0, 6, (n,), generator=g)


def multiclass_2d(g: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, 3, 4, generator=g), torch.randint(0, 3, (n, 4), generator=g)


def binary(g: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(0, 2, (n,), generator=g), torch.randint(0, 2, (n,), generator=g)


def binary_column(g: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(0, 2, (n, 1), generator=g).float(), torch.randint(0, 2, (n,), generator=g)


def multilabel(g: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(0, 2, (n, 4, 2), generator=g), torch.randint(0, 2, (n, 4, 2), generator=g)


def regression(g: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, 2, generator=g), torch.randn(n, 2, generator=g)


def regression_column(g: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, 1, generator=g), torch.randn(n, generator=g)


def vectors(g: torch.Generator, n: int) -> torch.Tensor:
    return torch.randn(n, 3, generator=g)


def scalars(g: torch.Generator, n: int) -> torch.Tensor:
    return torch.rand((), generator=g) * n


CASES: dict[str, tuple[Callable[[Any], Any], Callable[..., Any]]] = {
    # name: (make a metric from its module, data)
    "accuracy-multiclass": (lambda m: m.Accuracy(), multiclass),
    "accuracy-multiclass-2d": (lambda m: m.Accuracy(), multiclass_2d),
    "accuracy-binary": (lambda m: m.Accuracy(), binary),
    "accuracy-binary-column": (lambda m: m.Accuracy(), binary_column),
    "accuracy-multilabel": (lambda m: m.Accuracy(is_multilabel=True), multilabel),
    "top1": (lambda m: m.TopKCategoricalAccuracy(k=1), multiclass),
    "top3": (lambda m: m.TopKCategoricalAccuracy(k=3), multiclass),
    "loss-cross-entropy": (lambda m: m.Loss(F.cross_entropy), multiclass),
    "loss-mse": (lambda m: m.Loss(F.mse_loss), regression),
    "mse": (lambda m: m.MeanSquaredError(), regression),
    "mse-column": (lambda m: m.MeanSquaredError(), regression_column),
    "mae": (lambda m: m.MeanAbsoluteError(), regression),
    "mae-column": (lambda m: m.MeanAbsoluteError(), regression_column),
    "average-vectors": (lambda m: m.Average(), vectors),
    "average-scalars": (lambda m: m.Average(), scalars),
}


def as_float_or_tensor(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.ndim == 0:
        return value.item()
    return value


@pytest.mark.parametrize("case", sorted(CASES))
def test_standalone_values_match_ignite(case):
    make_metric, make_batch = CASES[case]
    data = batches(make_batch)
    theirs, mine = make_metric(ignite_metrics), make_metric(ours)
    for batch in data:
        theirs.update(batch)
        mine.update(batch)
    expected, actual = as_float_or_tensor(theirs.compute()), mine.compute()
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected)
    else:
        assert type(actual) is float
        assert actual == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("case", sorted(CASES))
def test_attached_values_match_ignite_every_epoch(case):
    make_metric, make_batch = CASES[case]
    data = batches(make_batch, seed=1)

    def run(engine_cls: Any, module: Any, events: Any) -> list[Any]:
        engine = engine_cls(lambda e, b: b)
        make_metric(module).attach(engine, "m")
        values: list[Any] = []
        engine.add_event_handler(events.EPOCH_COMPLETED, lambda e: values.append(e.state.metrics["m"]))
        engine.run(data, max_epochs=2)
        return values

    expected = run(ignite_engine.Engine, ignite_metrics, ignite_engine.Events)
    actual = run(Engine, ours, Events)
    assert len(actual) == len(expected) == 2
    for a, e in zip(actual, expected):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(a, e)
        else:
            assert a == pytest.approx(e, rel=1e-6)


def running_trace(
    engine_cls: Any, module: Any, events: Any, data: list[Any], make: Callable, **attach: Any
) -> list[float | None]:
    """The running value after every iteration and every epoch (None while there is none yet)."""
    engine = engine_cls(lambda e, b: b)
    make(module).attach(engine, "running", **attach)
    values: list[float | None] = []

    def read(e: Any) -> None:
        value = e.state.metrics.get("running")
        values.append(None if value is None else float(value))

    engine.add_event_handler(events.ITERATION_COMPLETED, read)
    engine.add_event_handler(events.EPOCH_COMPLETED, read)
    engine.run(data, max_epochs=3)
    return values


def assert_same_trace(actual: list[float | None], expected: list[float | None]) -> None:
    assert [v is None for v in actual] == [v is None for v in expected]
    assert [v for v in actual if v is not None] == pytest.approx([v for v in expected if v is not None], rel=1e-5)
    assert any(v is not None for v in expected)


@pytest.mark.parametrize(
    ("make", "attach"),
    [
        (lambda m: m.RunningAverage(output_transform=lambda out: F.cross_entropy(*out), alpha=0.9), {}),
        (lambda m: m.RunningAverage(output_transform=lambda out: F.cross_entropy(*out).item()), {}),
        (lambda m: m.RunningAverage(m.Accuracy(), alpha=0.7), {}),
        (lambda m: m.RunningAverage(m.Accuracy(), alpha=0.7), {"usage": "single_epoch_running_batch_wise"}),
        (lambda m: m.RunningAverage(m.Accuracy(), alpha=0.5), {"usage": "running_epoch_wise"}),
        (lambda m: m.RunningAverage(output_transform=lambda out: F.cross_entropy(*out)), {"usage": "batch_wise"}),
    ],
    ids=["output-tensor", "output-float", "src", "src-single-epoch", "src-running-epoch", "output-batch-wise"],
)
def test_running_average_matches_ignite(make, attach):
    data = batches(multiclass, seed=2)
    expected = running_trace(ignite_engine.Engine, ignite_metrics, ignite_engine.Events, data, make, **attach)
    actual = running_trace(Engine, ours, Events, data, make, **attach)
    assert_same_trace(actual, expected)


@pytest.mark.filterwarnings("ignore:`epoch_bound` is deprecated")
@pytest.mark.parametrize("epoch_bound", [True, False])
def test_running_average_epoch_bound_matches_ignite(epoch_bound):
    data = batches(multiclass, seed=3)

    def make(m: Any) -> Any:
        return m.RunningAverage(output_transform=lambda out: F.cross_entropy(*out), epoch_bound=epoch_bound)

    expected = running_trace(ignite_engine.Engine, ignite_metrics, ignite_engine.Events, data, make)
    actual = running_trace(Engine, ours, Events, data, make)
    assert_same_trace(actual, expected)


def test_composition_matches_ignite():
    data = batches(multiclass, seed=4)

    def make(m: Any) -> Any:
        accuracy, top3 = m.Accuracy(), m.TopKCategoricalAccuracy(k=3)
        return (accuracy * 2 + top3) / (1 - accuracy / 4) - top3**2

    theirs, mine = make(ignite_metrics), make(ours)
    for batch in data:
        theirs.update(batch)
        mine.update(batch)
    assert mine.compute() == pytest.approx(theirs.compute(), rel=1e-9)


def test_unrolled_lists_match_ignite():
    g = torch.Generator().manual_seed(5)
    output = ([torch.randn(4, generator=g) for _ in range(6)], [torch.randint(0, 4, (), generator=g) for _ in range(6)])

    def run(engine_cls: Any, module: Any) -> float:
        engine = engine_cls(lambda e, b: b)
        module.Accuracy().attach(engine, "acc")
        return engine.run([output]).metrics["acc"]

    assert run(Engine, ours) == run(ignite_engine.Engine, ignite_metrics)
