"""Every metric saves and loads what it accumulated (Ignite 0.5.5's `state_dict` format), so a checkpoint of it
resumes exactly; on an engine resumed from the same checkpoint a loaded metric continues, where Ignite's resets."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from tracktrain.engine import Engine, Events
from tracktrain.handlers import Checkpoint
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

g = torch.Generator().manual_seed(0)
SCORES = [(torch.randn(n, 4, generator=g), torch.randint(0, 4, (n,), generator=g)) for n in (5, 7, 3, 6)]
BINARY = [(torch.randint(0, 2, (n,), generator=g), torch.randint(0, 2, (n,), generator=g)) for n in (5, 7, 3, 6)]
REGRESSION = [(torch.randn(n, 1, generator=g), torch.randn(n, generator=g)) for n in (5, 7, 3, 6)]
VECTORS = [torch.randn(n, 3, generator=g) for n in (5, 7, 3, 6)]
NUMBERS = [0.5, 2.0, 3.25, 1.0]

# name -> (a new metric, the batches it is updated with)
CASES: dict[str, tuple[Callable[[], Metric], list]] = {
    "accuracy": (Accuracy, SCORES),
    "binary-accuracy": (Accuracy, BINARY),
    "top2": (lambda: TopKCategoricalAccuracy(k=2), SCORES),
    "loss": (lambda: Loss(F.cross_entropy), SCORES),
    "mse": (MeanSquaredError, REGRESSION),
    "mae": (MeanAbsoluteError, REGRESSION),
    "average-vectors": (Average, VECTORS),
    "average-numbers": (Average, NUMBERS),
    "running-output": (
        lambda: RunningAverage(output_transform=lambda x: x, alpha=0.7),
        [torch.tensor(v) for v in NUMBERS],
    ),
    "running-numbers": (lambda: RunningAverage(output_transform=lambda x: x, alpha=0.7), NUMBERS),
    "running-src": (lambda: RunningAverage(Accuracy(), alpha=0.5), SCORES),  # src updated first, see feed
    "lambda": (lambda: MetricsLambda(lambda a, b: a / b, Accuracy(), Loss(F.cross_entropy)), SCORES),
}


def through_a_file(state):
    """`state` as a checkpoint holds it: saved, then loaded with torch.load's default weights_only=True."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer)


def feed(metric: Metric, batch) -> None:
    """One update; a RunningAverage of a metric averages in its source's value, which the batch updates first."""
    if isinstance(metric, RunningAverage) and metric.src is not None:
        metric.src.update(batch)
    metric.update(batch)


def value(metric: Metric):
    result = metric.compute()
    return result.tolist() if isinstance(result, torch.Tensor) else result


@pytest.mark.parametrize("name", list(CASES))
def test_a_loaded_metric_continues_as_if_never_interrupted(name):
    make, batches = CASES[name]
    whole = make()
    for batch in batches:
        feed(whole, batch)

    first = make()
    for batch in batches[:2]:
        feed(first, batch)
    saved = through_a_file(first.state_dict())
    for batch in batches[2:]:  # the saved state is a copy: the metric goes on without changing it
        feed(first, batch)

    resumed = make()
    resumed.load_state_dict(saved)
    for batch in batches[2:]:
        feed(resumed, batch)
    assert value(resumed) == pytest.approx(value(whole))
    assert value(first) == pytest.approx(value(whole))


def test_the_state_is_ignites_format():
    ignite_metrics = pytest.importorskip("ignite.metrics")
    for ours, theirs in (
        (RunningAverage(output_transform=lambda x: x), ignite_metrics.RunningAverage(output_transform=lambda x: x)),
        (TopKCategoricalAccuracy(k=2), ignite_metrics.TopKCategoricalAccuracy(k=2)),
    ):
        for metric in (ours, theirs):
            metric.update(
                torch.tensor(2.0) if isinstance(metric, (RunningAverage, ignite_metrics.RunningAverage)) else SCORES[0]
            )
        mine, their = ours.state_dict(), theirs.state_dict()
        assert list(mine) == list(their) == ["__metric_state_per_rank"]
        assert [list(rank) for rank in mine["__metric_state_per_rank"]] == [
            list(rank) for rank in their["__metric_state_per_rank"]
        ]
        # Ignite's state loads here, and ours there
        ours.load_state_dict(their)
        theirs.load_state_dict(mine)
        assert float(ours.compute()) == pytest.approx(float(theirs.compute()))


def crashing_run(make_engine: Callable[[], tuple[Engine, Metric]], crash_at: int, data: list[float]):
    """Run until `crash_at`, checkpoint engine and metric, resume a new engine and metric from the checkpoint; the
    metric's value at each iteration, before and after."""
    engine, metric = make_engine()
    seen = []
    engine.add_event_handler(Events.ITERATION_COMPLETED, lambda e: seen.append(float(e.state.metrics["m"])))

    @engine.on(Events.ITERATION_COMPLETED(once=crash_at))
    def crash(_):
        raise RuntimeError("crash")

    with pytest.raises(RuntimeError, match="crash"):
        engine.run(data, max_epochs=2)
    checkpoint = through_a_file({"trainer": engine.state_dict(), "metric": metric.state_dict()})
    resumed_engine, resumed_metric = make_engine()
    resumed_engine.add_event_handler(Events.ITERATION_COMPLETED, lambda e: seen.append(float(e.state.metrics["m"])))
    Checkpoint.load_objects({"trainer": resumed_engine, "metric": resumed_metric}, checkpoint)
    resumed_engine.run(data, max_epochs=2)
    return seen


def test_a_resumed_running_average_continues_where_ignite_starts_over():
    data = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]

    def ours() -> tuple[Engine, Metric]:
        engine = Engine(lambda e, batch: batch)
        metric = RunningAverage(output_transform=lambda x: x, alpha=0.5)
        metric.attach(engine, "m")
        return engine, metric

    seen = crashing_run(ours, 4, data)
    # iteration 5 (the plain Engine restarts the epoch's data, as Ignite: batch 1.0) averages in the loaded value
    assert seen[3] == pytest.approx(3.125) and seen[4] == pytest.approx(0.5 * 3.125 + 0.5 * 1.0)

    ignite = pytest.importorskip("ignite")
    from ignite.engine import Engine as IgniteEngine
    from ignite.metrics import RunningAverage as IgniteRunningAverage

    engine = IgniteEngine(lambda e, batch: batch)
    metric = IgniteRunningAverage(output_transform=lambda x: x, alpha=0.5)
    metric.attach(engine, "m")
    engine.state.iteration, engine.state.epoch_length, engine.state.max_epochs = 4, 6, 2
    metric.load_state_dict({"__metric_state_per_rank": [{"_value": 3.125, "src": None}]})
    first = []
    engine.add_event_handler(
        ignite.engine.Events.ITERATION_COMPLETED(once=5), lambda e: first.append(e.state.metrics["m"])
    )
    engine.run(data, max_epochs=2)
    assert first == [1.0]  # Ignite's reset at STARTED dropped the loaded value


def test_an_epoch_metric_loaded_mid_epoch_continues_and_starts_over_at_the_next_epoch():
    def make() -> tuple[Engine, Metric]:
        engine = Engine(lambda e, batch: batch)
        metric = Average()
        metric.attach(engine, "m")
        engine.add_event_handler(Events.ITERATION_COMPLETED, lambda e: e.state.metrics.update(m=metric.compute()))
        return engine, metric

    data = [1.0, 2.0, 3.0, 4.0]
    seen = crashing_run(make, 3, data)
    # epoch 1 resumed after 3 batches: the last batch (the data restarts: 1.0) averages with the three loaded
    assert seen[3] == pytest.approx((1 + 2 + 3 + 1) / 4)
    # epoch 2 starts over (its first batch is the iterator's next: 2.0; not reset it would be 1.8)
    assert seen[4] == pytest.approx(2.0)

    fresh_engine, fresh = make()
    fresh.load_state_dict(through_a_file(fresh.state_dict()))
    fresh.update(5.0)
    fresh_engine.run([7.0], max_epochs=1)  # a new run (iteration 0) resets even a loaded metric
    assert fresh.compute() == 7.0


def test_a_checkpoint_holds_metrics(tmp_path):
    from tracktrain.handlers import DiskSaver

    engine = Engine(lambda e, batch: batch)
    running = RunningAverage(output_transform=lambda x: x)
    running.attach(engine, "running")
    checkpoint = Checkpoint({"trainer": engine, "running": running}, DiskSaver(tmp_path, require_empty=False))
    engine.add_event_handler(Events.EPOCH_COMPLETED, checkpoint)
    engine.run([1.0, 2.0], max_epochs=1)
    saved = torch.load(tmp_path / checkpoint.last_checkpoint)
    assert saved["running"]["__metric_state_per_rank"][0]["_value"] == pytest.approx(0.98 * 1.0 + 0.02 * 2.0)


def test_bad_states_are_refused():
    metric = Accuracy()
    with pytest.raises(TypeError, match="Argument state_dict should be a dictionary.*Accuracy.state_dict"):
        metric.load_state_dict([1])
    with pytest.raises(
        ValueError, match="Expected single key: __metric_state_per_rank, but given \\['_num_correct'\\]"
    ):
        metric.load_state_dict({"_num_correct": 1})
    with pytest.raises(ValueError, match="Expected a list of state_dicts of size equal world_size: 1, but got 2"):
        metric.load_state_dict({"__metric_state_per_rank": [{}, {}]})
    with pytest.raises(ValueError, match=r"Required state attribute\(s\) \['_num_examples'.*are absent"):
        metric.load_state_dict({"__metric_state_per_rank": [{"_num_correct": torch.tensor(1)}]})

    class Forgot(Average):
        _state_dict_all_req_keys = ("_sum", "_total")

    with pytest.raises(ValueError, match="not among metric attributes: _total"):
        Forgot().state_dict()
    with pytest.raises(TypeError, match="supported types include numeric types.*MetricsLambda.args\\[1\\] is a object"):
        MetricsLambda(lambda a, b: a, Accuracy(), object()).state_dict()
