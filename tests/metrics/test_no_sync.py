"""update() never reads a value back to the host: the hot path of every metric stays asynchronous on a GPU.

A CPU cannot show a sync, so the inputs are a Tensor subclass that records every call that would read a value to
the host (`item`, `bool(t)`, `float(t)`, `tolist`, `cpu`, `torch.equal`, ...); derived tensors are of the same
subclass, so a sync anywhere in update() is recorded. compute() is the positive control: it does read a value.
On a CUDA machine, the same is checked for real with `torch.cuda.set_sync_debug_mode("error")`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import pytest
import torch
import torch.nn.functional as F

from tracktrain.engine import Engine, Events
from tracktrain.metrics import (
    Accuracy,
    Average,
    Loss,
    MeanAbsoluteError,
    MeanSquaredError,
    Metric,
    MetricsLambda,
    RunningAverage,
    TopKCategoricalAccuracy,
)

SYNCING = {
    "item",
    "tolist",
    "numpy",
    "cpu",
    "__bool__",
    "__float__",
    "__int__",
    "__index__",
    "__complex__",
    "__array__",
    "__repr__",
    "__format__",
    "equal",
    "allclose",
    "is_nonzero",
}


class HostReadRecorder(torch.Tensor):
    """Records, in `calls`, every operation on it (or on tensors derived from it) that reads a value to the host."""

    calls: ClassVar[list[str]] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", repr(func))
        if name in SYNCING:
            cls.calls.append(name)
        return super().__torch_function__(func, types, args, kwargs or {})


def recorded(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(t.as_subclass(HostReadRecorder) for t in tensors)


def _g() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def multiclass() -> tuple[torch.Tensor, ...]:
    g = _g()
    return recorded(torch.randn(8, 4, generator=g), torch.randint(0, 4, (8,), generator=g))


def binary() -> tuple[torch.Tensor, ...]:
    g = _g()
    return recorded(torch.randint(0, 2, (8, 1), generator=g).float(), torch.randint(0, 2, (8,), generator=g))


def multilabel() -> tuple[torch.Tensor, ...]:
    g = _g()
    return recorded(torch.randint(0, 2, (8, 3), generator=g), torch.randint(0, 2, (8, 3), generator=g))


def regression() -> tuple[torch.Tensor, ...]:
    g = _g()
    return recorded(torch.randn(8, 1, generator=g), torch.randn(8, generator=g))


CASES: dict[str, tuple[Callable[[], Metric], Callable[[], Any]]] = {
    "accuracy-multiclass": (Accuracy, multiclass),
    "accuracy-binary": (Accuracy, binary),
    "accuracy-multilabel": (lambda: Accuracy(is_multilabel=True), multilabel),
    "top-k": (lambda: TopKCategoricalAccuracy(k=2), multiclass),
    "loss": (lambda: Loss(F.cross_entropy), multiclass),
    "loss-kwargs": (lambda: Loss(F.cross_entropy), lambda: (*multiclass(), {"label_smoothing": 0.1})),
    "mse": (MeanSquaredError, regression),
    "mae": (MeanAbsoluteError, regression),
    "average-batch": (Average, lambda: regression()[0]),
    "average-scalar-tensor": (Average, lambda: recorded(torch.tensor(2.5))[0]),
    "average-number": (Average, lambda: 2.5),
    "running-average": (lambda: RunningAverage(output_transform=lambda x: x), lambda: recorded(torch.tensor(2.5))[0]),
    "ratio": (lambda: Accuracy() / (MeanSquaredError() + 1), lambda: binary()),
}


def tensor_state(metric: Metric) -> set[tuple[int, str]]:
    """(metric, attribute) of every tensor attribute of the metric, or of the metrics a MetricsLambda combines."""
    metrics = metric._leaves() if isinstance(metric, MetricsLambda) else [metric]
    return {(id(m), name) for m in metrics for name, value in vars(m).items() if isinstance(value, torch.Tensor)}


# the cases whose compute() returns a scalar read from a recorded tensor: the recorder's positive control
SCALAR_FROM_RECORDED = {
    "accuracy-binary",
    "accuracy-multiclass",
    "accuracy-multilabel",
    "loss",
    "loss-kwargs",
    "mae",
    "mse",
    "top-k",
    "average-scalar-tensor",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_update_reads_nothing_back_to_the_host(case):
    make_metric, make_output = CASES[case]
    metric = make_metric()
    outputs = [make_output() for _ in range(3)]
    state_after_reset = tensor_state(metric)
    HostReadRecorder.calls.clear()
    for output in outputs:
        metric.update(output)
    assert HostReadRecorder.calls == []
    # what was accumulated in tensors still is (no sum turned into a Python number on the way)
    assert state_after_reset <= tensor_state(metric)
    metric.compute()
    if case in SCALAR_FROM_RECORDED:
        assert HostReadRecorder.calls, "the recorder must see compute() read the value"


def test_the_recorder_sees_a_host_read():
    (t,) = recorded(torch.tensor([1.0, 2.0]))
    HostReadRecorder.calls.clear()
    if (t > 1).any():  # bool() of a tensor: the classic hidden sync
        float(t.sum())
    assert HostReadRecorder.calls == ["__bool__", "__float__"]


def test_the_recorder_sees_ignites_per_update_value_check():
    """Ignite's Accuracy checks binary values with torch.equal in every update: the recorder must catch that."""
    ignite_metrics = pytest.importorskip("ignite.metrics")
    metric = ignite_metrics.Accuracy()
    y_pred, y = binary()
    HostReadRecorder.calls.clear()
    metric.update((y_pred, y))
    assert "equal" in HostReadRecorder.calls


def test_an_epoch_wise_run_reads_nothing_back_between_reset_and_compute():
    """The whole attached path (iteration_completed, output_transform, unrolling checks) stays on the device."""
    g = _g()
    batches = [recorded(torch.randn(8, 4, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(4)]
    engine = Engine(lambda e, b: b)
    window: list[list[str]] = []
    # registered before the metrics' own EPOCH_COMPLETED handlers, so compute() is left out of the window
    engine.add_event_handler(Events.EPOCH_COMPLETED, lambda: window.append(list(HostReadRecorder.calls)))
    for name, metric in {
        "acc": Accuracy(),
        "top2": TopKCategoricalAccuracy(k=2),
        "loss": Loss(F.cross_entropy),
        "mean_score": Average(output_transform=lambda out: out[0]),
    }.items():
        metric.attach(engine, name)
    RunningAverage(output_transform=lambda out: F.cross_entropy(*out)).attach(engine, "running_loss")
    engine.add_event_handler(Events.EPOCH_STARTED, HostReadRecorder.calls.clear)
    engine.run(batches, max_epochs=2)
    assert window == [[], []]
    assert set(engine.state.metrics) == {"acc", "top2", "loss", "mean_score", "running_loss"}


def test_running_average_writes_every_iteration_without_reading_back():
    engine = Engine(lambda e, b: b.sum())
    RunningAverage(output_transform=lambda loss: loss).attach(engine, "running")
    HostReadRecorder.calls.clear()
    engine.run([recorded(torch.randn(4))[0] for _ in range(5)], max_epochs=2)
    assert HostReadRecorder.calls == []
    assert isinstance(engine.state.metrics["running"], torch.Tensor)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("case", sorted(set(CASES) - {"ratio"}))
def test_update_on_cuda_never_synchronizes(case):
    make_metric, make_output = CASES[case]
    metric = make_metric()
    metric._device = torch.device("cuda")
    metric.reset()

    def to_cuda(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.as_subclass(torch.Tensor).cuda()
        if isinstance(value, tuple):
            return tuple(to_cuda(v) for v in value)
        return value

    outputs = [to_cuda(make_output()) for _ in range(3)]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for output in outputs:
            metric.update(output)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    metric.compute()
