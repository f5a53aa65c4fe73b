"""TerminateOnNan: NaN/Inf in numbers, tensors and nested outputs stops the run at that iteration."""

from __future__ import annotations

import logging
import math

import pytest
import torch

from tracktrain.engine import Engine, Events
from tracktrain.handlers import TerminateOnNan

NAN, INF = float("nan"), float("inf")


def run_until_stopped(outputs: list, handler: TerminateOnNan | None = None, max_epochs: int = 1) -> tuple[Engine, list]:
    """Run an engine whose process function returns outputs[iteration - 1]; return it and its TERMINATE trace."""
    engine = Engine(lambda e, batch: outputs[e.state.iteration - 1])
    engine.add_event_handler(Events.ITERATION_COMPLETED, handler or TerminateOnNan())
    terminated = []
    engine.add_event_handler(Events.TERMINATE, lambda e: terminated.append(e.state.iteration))
    engine.run(range(len(outputs) // max_epochs), max_epochs=max_epochs)
    return engine, terminated


@pytest.mark.parametrize(
    "bad",
    [
        NAN,
        -INF,
        torch.tensor(NAN),
        torch.tensor([1.0, 2.0, INF]),
        torch.tensor([[1.0], [NAN]], dtype=torch.float16),
        complex(1.0, INF),
        {"loss": 1.0, "parts": [torch.tensor(0.5), (2, {"deep": torch.tensor([NAN])})]},
        (torch.ones(3), "text", [1, 2.0, NAN]),
    ],
    ids=["float-nan", "float-inf", "tensor-nan", "tensor-inf", "half-2d", "complex", "nested-dict", "tuple"],
)
def test_non_finite_output_stops_the_run_at_that_iteration(bad, caplog):
    outputs = [1.0, torch.tensor(2.0), bad, 4.0, 5.0]
    with caplog.at_level(logging.WARNING, logger="tracktrain.handlers.terminate_on_nan"):
        engine, terminated = run_until_stopped(outputs)
    assert terminated == [3]
    assert engine.state.iteration == 3
    messages = [r.getMessage() for r in caplog.records if r.name.endswith("TerminateOnNan")]
    assert len(messages) == 1
    assert "iteration 3" in messages[0] and "epoch 1" in messages[0]
    assert ("nan" in messages[0].lower()) or ("inf" in messages[0].lower())


def test_stops_in_a_later_epoch_with_correct_epoch_in_the_warning(caplog):
    outputs = [0.1] * 7 + [torch.tensor([0.0, NAN])] + [0.1] * 4
    with caplog.at_level(logging.WARNING):
        engine, terminated = run_until_stopped(outputs, max_epochs=3)
    assert terminated == [8]
    assert (engine.state.epoch, engine.state.iteration) == (2, 8)
    assert any("iteration 8 (epoch 2)" in r.getMessage() for r in caplog.records)


def test_finite_outputs_and_non_numeric_values_never_stop():
    outputs = [
        1,
        10**400,  # finite, though too large for a float
        torch.tensor([1, 2, 3]),  # integer tensors are always finite
        torch.tensor([True, False]),
        torch.empty(0),
        {"name": "run", "values": [0.0, -1e300], "none": None},
        "nan",  # a string is not a number
        object(),
    ]
    engine, terminated = run_until_stopped(outputs)
    assert terminated == []
    assert engine.state.iteration == len(outputs)


def test_output_transform_selects_what_is_checked():
    outputs = [{"loss": 1.0, "y_pred": torch.tensor([NAN])}] * 3 + [{"loss": NAN, "y_pred": torch.zeros(1)}]
    engine, terminated = run_until_stopped(outputs, TerminateOnNan(output_transform=lambda out: out["loss"]))
    assert terminated == [4]
    with pytest.raises(TypeError, match="output_transform should be a function"):
        TerminateOnNan(output_transform="loss")


class SyncCountingTensor(torch.Tensor):
    """Counts the calls that copy a value to the host (the ones that wait for the device on a GPU)."""

    syncs = 0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.Tensor.__bool__, torch.Tensor.item, torch.Tensor.tolist):
            cls.syncs += 1
        return super().__torch_function__(func, types, args, kwargs or {})


def test_one_host_read_per_iteration_however_many_tensors():
    def output(value: float) -> dict:
        parts = [torch.tensor([value, 1.0]), torch.ones(3), torch.tensor(2.0), torch.zeros(2, 2)]
        return {"parts": [p.as_subclass(SyncCountingTensor) for p in parts], "lr": 0.1}

    SyncCountingTensor.syncs = 0
    engine, terminated = run_until_stopped([output(0.0)] * 5)
    assert terminated == []
    assert SyncCountingTensor.syncs == 5

    SyncCountingTensor.syncs = 0
    engine, terminated = run_until_stopped([output(0.0), output(NAN), output(0.0)])
    assert terminated == [2]
    assert SyncCountingTensor.syncs == 2


def test_same_stopping_iteration_as_ignite():
    pytest.importorskip("ignite")
    from ignite.engine import Engine as IgniteEngine
    from ignite.engine import Events as IgniteEvents
    from ignite.handlers import TerminateOnNan as IgniteTerminateOnNan

    cases = [
        [1.0, 2.0, NAN, 3.0],
        [torch.tensor(1.0), torch.tensor([1.0, INF]), 1.0],
        [{"a": [1.0, (torch.ones(2), {"b": torch.tensor(NAN)})]}, 1.0],
        [(1, 2), [3.0], {"x": torch.zeros(4)}, (torch.tensor(-INF),)],
        [1.0, 2.0, 3.0],
    ]
    for outputs in cases:
        _, terminated = run_until_stopped(outputs)
        ignite_engine = IgniteEngine(lambda e, b, outputs=outputs: outputs[e.state.iteration - 1])
        ignite_engine.add_event_handler(IgniteEvents.ITERATION_COMPLETED, IgniteTerminateOnNan())
        ignite_engine.run(range(len(outputs)), max_epochs=1)
        stopped = ignite_engine.state.iteration < len(outputs) or ignite_engine.should_terminate
        assert (terminated[0] if terminated else None) == (ignite_engine.state.iteration if stopped else None), outputs


def test_finite_check_matches_math_isfinite_on_floats():
    handler = TerminateOnNan()
    for value in [0.0, -1.5, 1e308, NAN, INF, -INF]:
        engine = Engine(lambda e, b, value=value: value)
        engine.add_event_handler(Events.ITERATION_COMPLETED, handler)
        engine.run([0, 1], max_epochs=1)
        assert (engine.state.iteration == 2) == math.isfinite(value)
