"""`tracktrain.distributed` as Ignite's `idist` (`tracktrain.distributed.ignite_api`): the same answers as Ignite
0.5.5's in one process, and a script run on two gloo processes by `Parallel(backend, nproc_per_node=2)`: the ranks,
the collectives, each rank's share of the data and the model wrapped for DDP."""

from __future__ import annotations

import json

import pytest
import torch

import tracktrain.distributed as idist
from tests import _processes
from tests._idist_ranks import each_rank

ignite_idist = pytest.importorskip("ignite.distributed")


def test_one_process_answers_as_ignites():
    for name in (
        "get_rank",
        "get_world_size",
        "get_local_rank",
        "get_nnodes",
        "get_node_rank",
        "backend",
        "model_name",
    ):
        assert getattr(idist, name)() == getattr(ignite_idist, name)(), name
    assert idist.device() == ignite_idist.device()
    assert idist.all_reduce(3.0) == ignite_idist.all_reduce(3.0)
    assert torch.equal(idist.all_gather(torch.tensor([1.0, 2.0])), ignite_idist.all_gather(torch.tensor([1.0, 2.0])))
    assert idist.all_gather("x") == ignite_idist.all_gather("x") == ["x"]
    assert idist.broadcast(5) == ignite_idist.broadcast(5)
    assert set(idist.available_backends()) <= set(ignite_idist.available_backends())
    model = torch.nn.Linear(2, 2)
    assert idist.auto_model(model) is model
    assert idist.auto_optim(torch.optim.SGD(model.parameters(), lr=0.1)).param_groups[0]["lr"] == 0.1
    loader = idist.auto_dataloader(list(range(10)), batch_size=4, shuffle=False)
    assert [b.tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]] and loader.pin_memory is False

    calls = []
    with idist.Parallel(backend=None) as parallel:
        parallel.run(lambda local_rank, value: calls.append((local_rank, value)), 7)
    assert calls == [(0, 7)]
    assert idist.one_rank_only()(lambda: "done")() == "done"
    with idist.one_rank_first():
        pass


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda: idist.Parallel(backend="horovod"), ValueError, "Unknown backend 'horovod'. Available backends"),
        (
            lambda: idist.Parallel(nproc_per_node=2),
            ValueError,
            "If backend is None, argument 'nproc_per_node' should be also None",
        ),
        (
            lambda: idist.Parallel("gloo", init_method="tcp://1.2.3.4:5"),
            ValueError,
            "TCP initialization via init_method",
        ),
        (lambda: idist.all_reduce(1.0, op="MEAN"), ValueError, "Unsupported reduction operation: 'MEAN'"),
        (lambda: idist.broadcast(None), ValueError, "should not be None"),
        (lambda: idist.auto_model(torch.nn.Linear(1, 1), find_unused=True), TypeError, r"\['find_unused'\]"),
        (lambda: idist.spawn("gloo", print, (), nnodes=2), ValueError, "started by torchrun"),
        (lambda: idist.initialize("gloo", init_method="env://"), TypeError, "joined from torchrun's environment"),
        (
            lambda: idist.auto_optim(torch.optim.SGD([torch.ones(1, requires_grad=True)], lr=1), op=1),
            TypeError,
            "Horovod",
        ),
    ],
)
def test_what_is_refused(build, error, match):
    with pytest.raises(error, match=match):
        build()


@pytest.mark.slow  # ~12 s: two spawned ranks, each importing torch (the collectives' own tests run by default)
@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_a_script_on_two_processes(tmp_path):
    with _processes.stopped_on_exit("the idist test's ranks"):
        with idist.Parallel(backend="gloo", nproc_per_node=2) as parallel:
            parallel.run(each_rank, str(tmp_path), 10)
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    for rank, result in enumerate(ranks):
        assert (result["rank"], result["local_rank"], result["world_size"]) == (rank, rank, 2)
        assert (result["backend"], result["model_name"], result["nproc_per_node"]) == ("gloo", "native-dist", 2)
        assert result["sum"] == 30.0 and result["max"] == 1.0
        assert result["gathered"] == [0.0, 1.0] and result["gathered_text"] == ["rank0", "rank1"]
        assert result["broadcast"] == "from zero"
        assert result["ddp"] == "DistributedDataParallel"
    # each rank its half of the data, in batches of 4 / 2 processes
    assert ranks[0]["batches"] == [[0, 2], [4, 6], [8, 10]] and ranks[1]["batches"] == [[1, 3], [5, 7], [9, 11]]
