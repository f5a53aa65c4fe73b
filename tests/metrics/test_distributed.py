"""Under torch.distributed every rank's compute() is the metric of all ranks' data together.

Two real processes with the gloo backend on the CPU, each updating the metrics with different data (different
numbers and sizes of batches); the parent computes each metric on the union of the data without
torch.distributed and compares it with what both ranks computed.
"""

from __future__ import annotations

import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from tests import _processes
from tracktrain.engine import Engine, Events
from tracktrain.metrics import (
    Accuracy,
    Average,
    Loss,
    MeanAbsoluteError,
    MeanSquaredError,
    RunningAverage,
    TopKCategoricalAccuracy,
)
from tracktrain_integrations.testing import free_port

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(60)]

WORLD_SIZE = 2
RUNNING_STEPS = 4


def rank_data(rank: int) -> dict[str, Any]:
    """Each rank's own data: different batch counts and sizes per rank."""
    g = torch.Generator().manual_seed(100 + rank)
    sizes = (5, 9, 3) if rank == 0 else (7, 2)
    return {
        "scores": [(torch.randn(n, 4, generator=g), torch.randint(0, 4, (n,), generator=g)) for n in sizes],
        "binary": [(torch.randint(0, 2, (n,), generator=g), torch.randint(0, 2, (n,), generator=g)) for n in sizes],
        "regression": [(torch.randn(n, 1, generator=g), torch.randn(n, generator=g)) for n in sizes],
        "vectors": [torch.randn(n, 3, generator=g) for n in sizes],
        "numbers": [float(v) for v in torch.rand(len(sizes) + rank, generator=g)],
        "running": [torch.rand((), generator=g) * 10 for _ in range(RUNNING_STEPS)],
    }


def metrics_over(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Every metric over the batches of `parts` (one rank's data, or both ranks' data in the parent)."""
    accuracy, top2, loss = Accuracy(), TopKCategoricalAccuracy(k=2), Loss(F.cross_entropy)
    binary, mse, mae = Accuracy(), MeanSquaredError(), MeanAbsoluteError()
    vectors, numbers = Average(), Average()
    ratio = accuracy / loss
    for part in parts:
        for batch in part["scores"]:
            for metric in (accuracy, top2, loss):
                metric.update(batch)
        for batch in part["binary"]:
            binary.update(batch)
        for batch in part["regression"]:
            mse.update(batch)
            mae.update(batch)
        for batch in part["vectors"]:
            vectors.update(batch)
        for number in part["numbers"]:
            numbers.update(number)
    return {
        "accuracy": accuracy.compute(),
        "top2": top2.compute(),
        "loss": loss.compute(),
        "binary": binary.compute(),
        "mse": mse.compute(),
        "mae": mae.compute(),
        "vectors": vectors.compute(),
        "numbers": numbers.compute(),
        "ratio": ratio.compute(),
    }


def outcome(fn: Any) -> Any:
    try:
        return fn()
    except Exception as error:  # the ranks must fail alike; the parent compares the errors
        return f"{type(error).__name__}: {error}"


def run_rank(rank: int) -> dict[str, Any]:
    data = rank_data(rank)
    results = metrics_over([data])

    # a rank without any update still gets the global value
    only_rank_1 = Accuracy()
    if rank == 1:
        for batch in data["scores"]:
            only_rank_1.update(batch)
    results["only_rank_1"] = only_rank_1.compute()

    # Average on a rank without updates: it has no sample shape, yet adds zeros of the other rank's shape
    vectors_of_rank_1, numbers_of_rank_1 = Average(), Average()
    if rank == 1:
        for batch in data["vectors"]:
            vectors_of_rank_1.update(batch)
        for number in data["numbers"]:
            numbers_of_rank_1.update(number)
    results["average_only_rank_1"] = (vectors_of_rank_1.compute(), numbers_of_rank_1.compute())

    # samples of different shapes on different ranks: every rank raises, none hangs or crashes
    mismatched = Average()
    mismatched.update(torch.ones(2, 3 + rank))
    results["average_mismatch"] = outcome(mismatched.compute)
    results["average_nothing"] = outcome(Average().compute)

    # no rank has data: every rank raises, none hangs
    results["nothing"] = outcome(Accuracy().compute)

    # one rank's bad binary values fail compute() on every rank, so no rank goes on alone
    bad = Accuracy()
    bad.update((torch.tensor([0.4, 1.0]) if rank == 1 else torch.tensor([0, 1]), torch.tensor([0, 1])))
    results["bad_binary"] = outcome(bad.compute)

    # the running average of the output is averaged over ranks at each update
    running = RunningAverage(alpha=0.5, output_transform=lambda x: x)
    running_values = []
    for value in data["running"]:
        running.update(value)
        running_values.append(float(running.compute()))
    results["running"] = running_values

    # state_dict gathers every rank's state; each rank loads its own back
    saved = Accuracy()
    for batch in data["scores"]:
        saved.update(batch)
    state = saved.state_dict()
    loaded = Accuracy()
    loaded.load_state_dict(state)
    results["state_dict"] = (len(state["__metric_state_per_rank"]), int(loaded._num_examples), loaded.compute())

    # attached to an engine: per-epoch values on every rank
    engine = Engine(lambda e, b: (b[0], (b[1] + e.state.epoch) % 4))
    Accuracy().attach(engine, "acc")
    per_epoch: list[float] = []
    engine.add_event_handler(Events.EPOCH_COMPLETED, lambda e: per_epoch.append(e.state.metrics["acc"]))
    engine.run(data["scores"], max_epochs=2)
    results["engine"] = per_epoch
    return results


def _worker(rank: int, port: int, out_dir: str) -> None:
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD_SIZE,
        timeout=timedelta(seconds=20),
    )
    try:
        results = run_rank(rank)
    except Exception:
        results = {"crash": traceback.format_exc()}
    finally:
        dist.destroy_process_group()
    torch.save(results, Path(out_dir) / f"rank{rank}.pt")


@pytest.fixture(scope="module")
def rank_results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out_dir = tmp_path_factory.mktemp("ddp")
    with _processes.stopped_on_exit("the metric tests' ranks"):  # a rank that hangs: its stack, then killed
        mp.spawn(_worker, args=(free_port(), str(out_dir)), nprocs=WORLD_SIZE, join=True)
    results = [torch.load(out_dir / f"rank{rank}.pt") for rank in range(WORLD_SIZE)]
    for result in results:
        assert "crash" not in result, result.get("crash")
    return results


def assert_same(actual: Any, expected: Any) -> None:
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected)
    else:
        assert actual == pytest.approx(expected, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("name", ["accuracy", "top2", "loss", "binary", "mse", "mae", "vectors", "numbers", "ratio"])
def test_every_rank_computes_the_metric_of_all_data(rank_results, name):
    expected = metrics_over([rank_data(rank) for rank in range(WORLD_SIZE)])[name]
    local = metrics_over([rank_data(0)])[name]
    for result in rank_results:
        assert_same(result[name], expected)
    if not isinstance(expected, torch.Tensor):
        assert local != pytest.approx(expected), "rank 0's own data must give another value, or the test is blind"


def test_state_dict_holds_every_ranks_state_and_each_rank_loads_its_own(rank_results):
    expected = metrics_over([rank_data(rank) for rank in range(WORLD_SIZE)])["accuracy"]
    for rank, result in enumerate(rank_results):
        count, examples, accuracy = result["state_dict"]
        assert count == WORLD_SIZE
        assert examples == sum(len(batch[1]) for batch in rank_data(rank)["scores"])
        assert accuracy == pytest.approx(expected)


def test_accuracy_of_all_data_is_the_direct_fraction(rank_results):
    batches = [b for rank in range(WORLD_SIZE) for b in rank_data(rank)["scores"]]
    hits = sum(int((b[0].argmax(1) == b[1]).sum()) for b in batches)
    total = sum(len(b[1]) for b in batches)
    assert rank_results[0]["accuracy"] == rank_results[1]["accuracy"] == hits / total


def test_a_rank_without_updates_gets_the_global_value(rank_results):
    expected = metrics_over([rank_data(1)])["accuracy"]
    assert [r["only_rank_1"] for r in rank_results] == [expected, expected]


def test_an_average_without_updates_on_one_rank_gets_the_other_ranks_mean(rank_results):
    vectors = torch.cat(rank_data(1)["vectors"]).double()
    numbers = rank_data(1)["numbers"]
    for result in rank_results:
        vector_mean, number_mean = result["average_only_rank_1"]
        torch.testing.assert_close(vector_mean, vectors.mean(dim=0))
        assert number_mean == pytest.approx(sum(numbers) / len(numbers))


def test_average_errors_are_raised_on_every_rank(rank_results):
    for result in rank_results:
        assert result["average_mismatch"] == (
            "ValueError: Average: the processes accumulated samples of different shapes (largest (4,), smallest "
            "(3,)); every process must give samples of the same shape."
        )
        assert result["average_nothing"].startswith("NotComputableError: Average must have at least one example")


def test_errors_are_raised_on_every_rank(rank_results):
    for result in rank_results:
        assert result["nothing"].startswith("NotComputableError: Accuracy must have at least one example")
        assert result["bad_binary"].startswith(
            "ValueError: For binary cases, y_pred must be comprised of 0's and 1's. Accuracy got binary inputs whose "
            "y_pred held other values in 1 update"
        )


def test_running_average_averages_the_ranks_outputs_each_step(rank_results):
    outputs = [rank_data(rank)["running"] for rank in range(WORLD_SIZE)]
    expected: list[float] = []
    for step in range(RUNNING_STEPS):
        mean = sum(float(o[step]) for o in outputs) / WORLD_SIZE
        expected.append(mean if not expected else 0.5 * expected[-1] + 0.5 * mean)
    for result in rank_results:
        assert result["running"] == pytest.approx(expected)


def test_attached_metrics_are_global_and_per_epoch(rank_results):
    batches = [b for rank in range(WORLD_SIZE) for b in rank_data(rank)["scores"]]
    expected = []
    for epoch in (1, 2):
        hits = sum(int((b[0].argmax(1) == (b[1] + epoch) % 4).sum()) for b in batches)
        expected.append(hits / sum(len(b[1]) for b in batches))
    assert rank_results[0]["engine"] == rank_results[1]["engine"] == pytest.approx(expected)
