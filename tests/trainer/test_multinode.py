"""Two "nodes" on loopback: two torchrun launchers (`--nnodes 2`, one rank each) meeting at one c10d rendezvous, as
two machines would. A rank killed mid-run is restarted by its launcher (`--max-restarts`), the other node's rank
restarts with it, and the run resumes from its last checkpoint and ends bit-identical to a run never interrupted.

The launchers run with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, as the README says to: a restart through the
rendezvous store the launcher shares with its ranks can hang or be refused (PyTorch issue 135712)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

from tests import _processes
from tests.trainer._resume_run import SCRIPT, STEPS, Run
from tracktrain.distributed.collectives import restarts_share_the_rendezvous_store
from tracktrain_integrations.testing import free_port

pytestmark = pytest.mark.distributed

RANK_SCRIPT = """
import os, warnings
from tracktrain.distributed import collectives as distributed
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    distributed.init_from_env()
print("rank", os.environ["RANK"], "warned", any("135712" in str(w.message) for w in caught), flush=True)
import torch.distributed as dist
dist.destroy_process_group()
"""


def node(
    port: int, script: Path, *arguments: object, max_restarts: int, share_store: bool = False
) -> _processes.Command:
    """One node's launcher: `torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d` on the shared endpoint,
    with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 unless `share_store`."""
    environment = dict(os.environ)
    environment.pop("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", None)  # the caller's own setting, if any, left out
    if not share_store:
        environment["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "2",
        "--nproc-per-node",
        "1",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        "tracktrain-two-nodes",
        "--max-restarts",
        str(max_restarts),
        "--monitor-interval",
        "0.5",
        script,
        *arguments,
    ]
    return _processes.Command(command, env=environment)


def ranks_of(nodes: list[_processes.Command], timeout: float = 120.0) -> list[dict[int, int]]:
    """Each node's {RANK: pid}, once the rendezvous gave every node its rank."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [launcher.ranks() for launcher in nodes]
        if sorted(rank for ranks in found for rank in ranks) == [0, 1]:
            return found
        time.sleep(0.2)
    raise nodes[0].hang("the two nodes did not both start a rank")


@pytest.mark.parametrize("share_store", [True, pytest.param(False, marks=pytest.mark.slow)])  # False: next test
def test_rank_zero_warns_when_restarts_of_several_nodes_share_the_rendezvous_store(tmp_path, share_store):
    """As torchrun sets up each rank's environment: with --max-restarts on 2 nodes, the store shared unless the
    launchers have TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1."""
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    port = free_port()
    nodes = [node(port, script, max_restarts=1, share_store=share_store) for _ in range(2)]
    with nodes[0], nodes[1]:
        assert [launcher.wait(120) for launcher in nodes] == [0, 0], [launcher.stderr[-2000:] for launcher in nodes]
    said = sorted(line for launcher in nodes for line in launcher.lines if line.startswith("rank "))
    assert said == ["rank 0 warned " + str(share_store), "rank 1 warned False"]  # rank 0 says it, once


@pytest.mark.parametrize(
    ("environment", "shared"),
    [
        ({"TORCHELASTIC_MAX_RESTARTS": "1", "GROUP_WORLD_SIZE": "2", "TORCHELASTIC_USE_AGENT_STORE": "True"}, True),
        ({"TORCHELASTIC_MAX_RESTARTS": "1", "GROUP_WORLD_SIZE": "2", "TORCHELASTIC_USE_AGENT_STORE": "False"}, False),
        ({"TORCHELASTIC_MAX_RESTARTS": "0", "GROUP_WORLD_SIZE": "2", "TORCHELASTIC_USE_AGENT_STORE": "True"}, False),
        ({"TORCHELASTIC_MAX_RESTARTS": "3", "GROUP_WORLD_SIZE": "1", "TORCHELASTIC_USE_AGENT_STORE": "True"}, False),
        ({"TORCHELASTIC_MAX_RESTARTS": "x", "GROUP_WORLD_SIZE": "2", "TORCHELASTIC_USE_AGENT_STORE": "True"}, False),
        ({}, False),
    ],
)
def test_only_restarts_of_several_nodes_through_the_agents_store_count_as_sharing_it(environment, shared):
    """The rule the launches above check end to end (the launch without the shared store runs in the slow tier)."""
    assert restarts_share_the_rendezvous_store(environment) is shared


@pytest.mark.slow
def test_a_rank_killed_on_one_node_restarts_both_nodes_from_the_last_checkpoint_bit_identical(tmp_path):
    root, out = str(tmp_path / "run"), tmp_path / "out.pt"
    port = free_port()
    nodes = [node(port, SCRIPT, root, out, "0", max_restarts=2) for _ in range(2)]
    with nodes[0], nodes[1]:
        found = ranks_of(nodes)
        first = next(index for index, ranks in enumerate(found) if 0 in ranks)  # rank 0 prints
        printer = nodes[first]
        # past a checkpoint (every 3 steps) and mid-way between two
        assert printer.wait_for(lambda line: line == "step 10", timeout=120) == "step 10"
        (victim,) = found[1 - first].values()
        os.kill(victim, signal.SIGKILL)  # one worker of the other node dies, its launcher lives
        statuses = [launcher.wait(240) for launcher in nodes]
        assert statuses == [0, 0], [launcher.stderr[-3000:] for launcher in nodes]
    # whichever node has rank 0 after the restart printed where the run resumed
    lines = [line for launcher in nodes for line in launcher.lines]
    # (either node may hold rank 0 after the restart: the lines are told apart by what they say, not their order)
    resumed = sorted((line.split(" ") for line in lines if line.startswith("resumed ")), key=lambda said: int(said[2]))
    assert len(resumed) == 2, lines
    assert resumed[0][1] == "None" and resumed[0][2] == "0"  # the first start
    path, step = resumed[1][1], int(resumed[1][2])
    # the newest checkpoint before the kill (every 3 steps; the ranks may finish a step or two after the line)
    assert step in (9, 12) and path.endswith(f"_{step}.pt"), resumed
    assert f"done {STEPS // 2}" in lines

    reference = Run(str(tmp_path / "reference"), tmp_path / "reference.pt", 0, ranks=2)
    assert reference.finish() == 0, reference.stderr[-3000:]
    expected = torch.load(tmp_path / "reference.pt", weights_only=True)
    for rank_file in (out, Path(f"{out}.rank1")):
        actual = torch.load(rank_file, weights_only=True)
        assert actual.keys() == expected.keys()
        assert all(torch.equal(actual[name], expected[name]) for name in expected), rank_file
