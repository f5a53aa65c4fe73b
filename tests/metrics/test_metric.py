"""The Metric base: attaching to an Engine per usage, detaching, output handling, results, composition."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tracktrain.engine import Engine, Events
from tracktrain.metrics import (
    Accuracy,
    Average,
    BatchWise,
    EpochWise,
    MeanSquaredError,
    Metric,
    MetricsLambda,
    NotComputableError,
    RunningBatchWise,
    RunningEpochWise,
    SingleEpochRunningBatchWise,
)


def echo_engine() -> Engine:
    """An engine whose output is the batch itself."""
    return Engine(lambda engine, batch: batch)


def record_metric(engine: Engine, name: str, event: Any = Events.EPOCH_COMPLETED) -> list[Any]:
    """Values of `engine.state.metrics[name]` at each `event` (registered after the metric, so it reads them)."""
    values: list[Any] = []
    engine.add_event_handler(event, lambda e: values.append(e.state.metrics.get(name, "missing")))
    return values


class Counting(Metric):
    """Sums a scalar output and counts its reset/update/compute calls."""

    def __init__(self, **kwargs: Any) -> None:
        self.resets = self.updates = self.computes = 0
        super().__init__(**kwargs)

    def reset(self) -> None:
        self.resets += 1
        self.total = torch.zeros(())
        self.seen = 0

    def update(self, output: Any) -> None:
        self.updates += 1
        self.total += output
        self.seen += 1

    def compute(self) -> float:
        self.computes += 1
        if self.seen == 0:
            raise NotComputableError("nothing yet")
        return self.total.item()


# ------------------------------------------------------------------------------------------------------ usages
def test_epoch_wise_values_are_per_epoch_not_cumulative():
    # epoch e predicts e for targets 0: the squared error of epoch e is e**2, the cumulative mean would differ
    engine = Engine(lambda e, batch: (torch.full((batch,), float(e.state.epoch)), torch.zeros(batch)))
    mse = MeanSquaredError()
    mse.attach(engine, "mse")
    values = record_metric(engine, "mse")
    engine.run([2, 3, 5], max_epochs=3)
    assert values == [1.0, 4.0, 9.0]


def test_epoch_wise_resets_between_runs_and_accumulates_every_iteration():
    engine = echo_engine()
    total = Counting()
    total.attach(engine, "total")
    engine.run([torch.tensor(1.0), torch.tensor(2.0), torch.tensor(4.0)], max_epochs=2)
    assert engine.state.metrics["total"] == 7.0
    assert total.updates == 6
    assert total.computes == 2


def test_batch_wise_is_each_batch_alone():
    engine = echo_engine()
    Average().attach(engine, "avg", usage=BatchWise())
    values = record_metric(engine, "avg", Events.ITERATION_COMPLETED)
    engine.run([torch.tensor([[1.0], [3.0]]), torch.tensor([[10.0]]), torch.tensor([[4.0], [6.0]])])
    assert values == [2.0, 10.0, 5.0]


def test_running_epoch_wise_updates_once_per_epoch_from_the_last_output_and_never_resets():
    # Ignite's semantics: started on STARTED, update and compute on EPOCH_COMPLETED
    engine = Engine(lambda e, batch: float(10 * e.state.epoch + batch))
    Average().attach(engine, "avg", usage="running_epoch_wise")
    values = record_metric(engine, "avg")
    engine.run([1, 2], max_epochs=3)
    last_outputs = [12.0, 22.0, 32.0]
    assert values == pytest.approx([sum(last_outputs[: i + 1]) / (i + 1) for i in range(3)])


@pytest.mark.parametrize(
    ("name", "usage_cls"),
    [
        ("epoch_wise", EpochWise),
        ("running_epoch_wise", RunningEpochWise),
        ("batch_wise", BatchWise),
        ("running_batch_wise", RunningBatchWise),
        ("single_epoch_running_batch_wise", SingleEpochRunningBatchWise),
    ],
)
def test_usage_names_are_the_usages(name, usage_cls):
    engine = echo_engine()
    metric = Average()
    metric.attach(engine, "avg", usage=name)
    assert metric.is_attached(engine, usage_cls())
    assert metric.is_attached(engine, name)
    usage = usage_cls()
    assert usage.usage_name == name
    assert engine.has_event_handler(metric.started, usage.STARTED)
    assert engine.has_event_handler(metric.iteration_completed, usage.ITERATION_COMPLETED)
    assert engine.has_event_handler(metric.completed, usage.COMPLETED)


def test_events_of_each_usage_match_ignite():
    assert (EpochWise().STARTED, EpochWise().ITERATION_COMPLETED, EpochWise().COMPLETED) == (
        Events.EPOCH_STARTED,
        Events.ITERATION_COMPLETED,
        Events.EPOCH_COMPLETED,
    )
    assert (RunningEpochWise().STARTED, RunningEpochWise().ITERATION_COMPLETED, RunningEpochWise().COMPLETED) == (
        Events.STARTED,
        Events.EPOCH_COMPLETED,
        Events.EPOCH_COMPLETED,
    )
    assert (BatchWise().STARTED, BatchWise().ITERATION_COMPLETED, BatchWise().COMPLETED) == (
        Events.ITERATION_STARTED,
        Events.ITERATION_COMPLETED,
        Events.ITERATION_COMPLETED,
    )


def test_unknown_usage_is_refused():
    metric = Average()
    with pytest.raises(ValueError, match=r"Argument usage should be .*, got per_batch\. Use one of .*'batch_wise'"):
        metric.attach(echo_engine(), "avg", usage="per_batch")
    with pytest.raises(TypeError, match="usage must be a MetricUsage"):
        metric.attach(echo_engine(), "avg", usage=3)


def test_name_must_be_a_string():
    with pytest.raises(TypeError, match="name must be a str, got 3"):
        Average().attach(echo_engine(), 3)


def test_detach_removes_every_handler_and_the_value():
    engine = echo_engine()
    metric = Average()
    metric.attach(engine, "avg")
    assert metric.is_attached(engine)
    metric.detach(engine)
    assert not metric.is_attached(engine)
    assert not engine.has_event_handler(metric.started)
    assert not engine.has_event_handler(metric.iteration_completed)
    engine.run([1.0, 2.0])
    assert "avg" not in engine.state.metrics
    metric.detach(engine)  # detaching again is harmless


def test_detach_one_usage_leaves_the_other():
    engine = echo_engine()
    metric = Average()
    metric.attach(engine, "epoch")
    metric.attach(engine, "batch", usage="batch_wise")
    metric.detach(engine, usage="batch_wise")
    assert metric.is_attached(engine) and not metric.is_attached(engine, "batch_wise")
    engine.run([1.0, 3.0])
    assert engine.state.metrics == {"epoch": 2.0}


def test_attached_under_two_names_updates_once():
    engine = echo_engine()
    metric = Counting()
    metric.attach(engine, "a")
    metric.attach(engine, "b")
    engine.run([torch.tensor(1.0), torch.tensor(2.0)])
    assert metric.updates == 2
    assert engine.state.metrics["a"] == engine.state.metrics["b"] == 3.0


# ------------------------------------------------------------------------------------------------ output handling
def test_mapping_output_is_read_at_required_keys():
    engine = echo_engine()
    Accuracy().attach(engine, "acc")
    batches = [{"y_pred": torch.tensor([[0.9, 0.1], [0.2, 0.8]]), "y": torch.tensor([0, 0]), "x": None}]
    assert engine.run(batches).metrics["acc"] == 0.5


def test_mapping_output_without_a_required_key_names_it():
    engine = echo_engine()
    Accuracy().attach(engine, "acc")
    with pytest.raises(ValueError, match=r"keys \['y_pred', 'y'\].*\['y'\] are missing.*keys given: \['y_pred'\]"):
        engine.run([{"y_pred": torch.zeros(2, 2)}])


def test_mapping_output_for_a_metric_of_plain_values_asks_for_output_transform():
    engine = echo_engine()
    Average().attach(engine, "avg")
    with pytest.raises(TypeError, match=r"Average takes the output itself, not a mapping.*out\['loss'\]"):
        engine.run([{"loss": 1.0}])


def test_lists_of_samples_are_unrolled_into_batches_of_one():
    engine = echo_engine()
    Accuracy().attach(engine, "acc")
    y_preds = [torch.tensor([0.9, 0.1]), torch.tensor([0.3, 0.7]), torch.tensor([0.6, 0.4])]
    ys = [torch.tensor(0), torch.tensor(1), torch.tensor(1)]
    assert engine.run([(y_preds, ys)]).metrics["acc"] == pytest.approx(2 / 3)


def test_lists_of_different_lengths_are_refused():
    engine = echo_engine()
    Accuracy().attach(engine, "acc")
    with pytest.raises(ValueError, match=r"two lists of the same length.*lengths \[2, 1\]"):
        engine.run([([torch.zeros(2), torch.zeros(2)], [torch.tensor(0)])])


def test_skip_unrolling_hands_the_output_over_whole():
    seen = []

    class Whole(Counting):
        def update(self, output: Any) -> None:
            seen.append(output)

    engine = echo_engine()
    Whole(skip_unrolling=True).attach(engine, "whole")
    batch = ([1.0, 2.0], [3.0, 4.0])
    with pytest.raises(NotComputableError):
        engine.run([batch])
    assert seen == [batch]


def test_output_transform_is_applied_when_attached():
    engine = echo_engine()
    Average(output_transform=lambda out: out["loss"]).attach(engine, "loss")
    assert engine.run([{"loss": 1.0}, {"loss": 2.0}]).metrics["loss"] == 1.5


# ------------------------------------------------------------------------------------------------------ results
class Fixed(Metric):
    """Computes whatever it was given, to test how results are written."""

    def __init__(self, result: Any) -> None:
        self.result = result
        super().__init__()

    def reset(self) -> None:
        pass

    def update(self, output: Any) -> None:
        pass

    def compute(self) -> Any:
        return self.result


def test_mapping_result_is_written_flat_and_under_its_name():
    engine = echo_engine()
    Fixed({"precision": 0.5, "recall": 0.25}).attach(engine, "pr")
    metrics = engine.run([1]).metrics
    assert metrics == {"precision": 0.5, "recall": 0.25, "pr": {"precision": 0.5, "recall": 0.25}}


def test_mapping_result_with_its_own_name_as_key_is_refused():
    engine = echo_engine()
    Fixed({"pr": 0.5}).attach(engine, "pr")
    with pytest.raises(ValueError, match=r"name 'pr' is also a key .*\['pr'\]"):
        engine.run([1])


def test_scalar_tensor_results_become_floats_and_others_stay_tensors():
    engine = echo_engine()
    Fixed(torch.tensor(0.25)).attach(engine, "scalar")
    Fixed(torch.tensor([1.0, 2.0])).attach(engine, "vector")
    metrics = engine.run([1]).metrics
    assert metrics["scalar"] == 0.25 and type(metrics["scalar"]) is float
    assert torch.equal(metrics["vector"], torch.tensor([1.0, 2.0]))


# ------------------------------------------------------------------------------------------- construction errors
def test_output_transform_must_be_callable():
    with pytest.raises(TypeError, match="Average: output_transform must be callable, got 3"):
        Average(output_transform=3)


def test_device_must_be_a_device():
    with pytest.raises(ValueError, match="device='gpu0' is not a torch device"):
        Average(device="gpu0")
    with pytest.raises(ValueError, match="cannot accumulate on an XLA device"):
        Average(device="xla")


# ---------------------------------------------------------------------------------------------------- composition
def test_ratio_of_two_metrics_is_precision():
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    generator = torch.Generator().manual_seed(0)
    batches = [
        (torch.randint(0, 2, (n,), generator=generator), torch.randint(0, 2, (n,), generator=generator))
        for n in (7, 12, 5)
    ]
    true_positives = Average(output_transform=lambda out: (out[0] * out[1]).sum())
    predicted_positives = Average(output_transform=lambda out: out[0].sum())
    precision = true_positives / predicted_positives
    assert isinstance(precision, MetricsLambda)
    engine = echo_engine()
    precision.attach(engine, "precision")
    value = engine.run(batches).metrics["precision"]
    y_pred = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    assert value == pytest.approx(sklearn_metrics.precision_score(y.numpy(), y_pred.numpy()))


def _constant(value: float) -> Average:
    metric = Average()
    metric.update(value)
    return metric


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda a, b: a + b, 10.0),
        (lambda a, b: a + 1, 9.0),
        (lambda a, b: 1 + a, 9.0),
        (lambda a, b: a - b, 6.0),
        (lambda a, b: 10 - a, 2.0),
        (lambda a, b: a * b, 16.0),
        (lambda a, b: 3 * a, 24.0),
        (lambda a, b: a / b, 4.0),
        (lambda a, b: 16 / a, 2.0),
        (lambda a, b: a // 3, 2.0),
        (lambda a, b: a % 3, 2.0),
        (lambda a, b: a**b, 64.0),
        (lambda a, b: 2**b, 4.0),
        (lambda a, b: -a, -8.0),
        (lambda a, b: (a + b) / (a - b), 10 / 6),
    ],
)
def test_arithmetic_on_metrics(build, expected):
    assert build(_constant(8.0), _constant(2.0)).compute() == pytest.approx(expected)


def test_indexing_a_metric_picks_from_its_value():
    metric = Average()
    metric.update(torch.tensor([[1.0, 10.0], [3.0, 30.0]]))
    assert metric[1].compute() == pytest.approx(20.0)


def test_a_metric_is_not_iterable():
    with pytest.raises(TypeError, match="Average is not iterable"):
        list(Average())


def test_lambda_updates_and_computes_each_dependency_once():
    counting = Counting()
    other = Counting()
    combined = counting / other + counting * counting
    engine = echo_engine()
    combined.attach(engine, "combined")
    engine.run([torch.tensor(2.0), torch.tensor(4.0)], max_epochs=2)
    assert engine.state.metrics["combined"] == pytest.approx(6.0 / 6.0 + 36.0)
    assert counting.updates == other.updates == 4
    assert counting.computes == other.computes == 2
    assert combined.is_attached(engine)
    assert not counting.is_attached(engine)  # its handlers are there, but its own value is not written


def test_lambda_is_not_attached_once_a_dependency_is_detached():
    a, b = Average(), Average()
    ratio = a / b
    engine = echo_engine()
    ratio.attach(engine, "ratio")
    a.detach(engine)
    assert not ratio.is_attached(engine)
    ratio.detach(engine)
    assert not engine.has_event_handler(ratio.completed)


def test_lambda_standalone_resets_and_updates_each_dependency_once():
    counting = Counting()
    total = counting + counting
    total.update(torch.tensor(3.0))
    assert counting.updates == 1
    assert total.compute() == 6.0
    total.reset()
    with pytest.raises(NotComputableError):
        total.compute()


def test_lambda_refuses_update_while_attached_and_attach_after_updates():
    ratio = Average() / Average()
    engine = echo_engine()
    ratio.attach(engine, "ratio")
    with pytest.raises(ValueError, match="attached to an engine"):
        ratio.update(1.0)
    used = Average() / Average()
    used.update(1.0)
    with pytest.raises(ValueError, match="call reset\\(\\) before attaching"):
        used.attach(engine, "used")


def test_lambda_takes_plain_arguments_and_keywords():
    def weighted(x, y, weight):
        return weight * x + y

    metric = MetricsLambda(weighted, _constant(2.0), 1.0, weight=_constant(3.0))
    assert metric.compute() == 7.0
    with pytest.raises(TypeError, match="f must be callable"):
        MetricsLambda(3, _constant(1.0))


def test_building_a_combination_keeps_what_its_metrics_accumulated():
    total = Counting()
    total.update(torch.tensor(5.0))
    doubled = total * 2  # Ignite's MetricsLambda would reset `total` here
    assert doubled.compute() == 10.0
    assert total.resets == 1
