"""AsyncSaver: the snapshot is the state at save time, writes keep their order, and a failed background write
is raised (naming the file) with nothing queued after it done."""

from __future__ import annotations

import threading
from collections import OrderedDict

import pytest
import torch
from torch import nn

from tracktrain.checkpoint.async_saver import AsyncSaver, cpu_snapshot
from tracktrain.checkpoint.savers import FsspecSaver


class Gated:
    """A save handler that records what it got, and holds each write until the test opens the gate."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.gate = threading.Event()
        self.events: list[tuple[str, str]] = []
        self.saved: dict[str, dict] = {}
        self.fail_on = fail_on

    def __call__(self, checkpoint, filename, metadata=None):
        self.gate.wait(10)
        if filename == self.fail_on:
            raise OSError("disk full")
        self.saved[filename] = checkpoint
        self.events.append(("save", filename))

    def remove(self, filename):
        self.events.append(("remove", filename))


def test_the_file_holds_the_state_at_save_time_not_after():
    model = nn.Linear(3, 3)
    inner = Gated()
    saver = AsyncSaver(inner)
    before = model.weight.detach().clone()
    saver({"model": model.state_dict()}, "a.pt")  # returns before the write
    assert inner.saved == {}
    with torch.no_grad():
        model.weight.add_(1.0)  # training goes on, in place
    inner.gate.set()
    saver.wait()
    assert torch.equal(inner.saved["a.pt"]["model"]["weight"], before)


def test_operations_keep_their_order_and_a_failure_stops_what_follows():
    inner = Gated(fail_on="b.pt")
    saver = AsyncSaver(inner)
    inner.gate.set()
    saver({"x": torch.ones(1)}, "a.pt")
    saver.remove("old.pt")
    saver.wait()
    inner.gate.clear()
    saver({"x": torch.ones(1)}, "b.pt")
    saver.remove("a.pt")  # retention after a save that will fail: must not happen
    inner.gate.set()
    with pytest.raises(RuntimeError, match=r"Saving checkpoint 'b.pt' in the background failed: disk full"):
        saver.wait()
    assert inner.events == [("save", "a.pt"), ("remove", "old.pt")]
    saver.wait()  # raised once; the saver goes on working
    saver({"x": torch.ones(1)}, "c.pt")
    saver.wait()
    assert inner.events[-1] == ("save", "c.pt")


def test_the_next_save_waits_for_the_previous_one():
    inner = Gated()
    saver = AsyncSaver(inner)
    saver({"x": torch.zeros(1)}, "a.pt")
    started = threading.Event()

    def second():
        started.set()
        saver({"x": torch.zeros(1)}, "b.pt")

    thread = threading.Thread(target=second)
    thread.start()
    started.wait()
    thread.join(0.2)
    assert thread.is_alive()  # blocked behind a.pt
    inner.gate.set()
    thread.join(5)
    saver.wait()
    assert [name for _, name in inner.events] == ["a.pt", "b.pt"]


def test_saves_of_one_state_inside_one_snapshot_share_its_copies_and_do_not_wait_for_each_other():
    model = nn.Linear(3, 3)
    inner = Gated()  # holds every write until the gate opens
    saver = AsyncSaver(inner)
    with saver.one_snapshot():
        saver({"model": model.state_dict(), "step": 4}, "best_4.pt")
        saver({"model": model.state_dict(), "step": 4}, "last_4.pt")  # would block here behind best_4.pt
    assert inner.saved == {}
    with torch.no_grad():
        model.weight.add_(1.0)  # the next step
    inner.gate.set()
    saver.wait()
    best, last = inner.saved["best_4.pt"]["model"], inner.saved["last_4.pt"]["model"]
    assert best["weight"] is last["weight"] and best["bias"] is last["bias"]  # one copy in memory
    assert not torch.equal(best["weight"], model.weight)  # the state at save time
    # outside it, each save has its own copies again
    saver({"model": model.state_dict()}, "next.pt")
    saver.wait()
    assert inner.saved["next.pt"]["model"]["weight"] is not best["weight"]
    assert torch.equal(inner.saved["next.pt"]["model"]["weight"], model.weight)


def test_snapshot_keeps_tied_tensors_tied_and_module_metadata():
    model = nn.Sequential(nn.Embedding(4, 2), nn.Linear(2, 4, bias=False), nn.BatchNorm1d(4))
    model[1].weight = model[0].weight
    state = model.state_dict()
    snapshot = cpu_snapshot({"model": state, "step": 3, "groups": [{"lr": 0.1}]})
    assert snapshot["model"]["0.weight"] is snapshot["model"]["1.weight"]
    assert snapshot["model"]["0.weight"] is not state["0.weight"]
    assert isinstance(snapshot["model"], OrderedDict) and snapshot["model"]._metadata == state._metadata
    assert snapshot["step"] == 3 and snapshot["groups"] == [{"lr": 0.1}]


def test_through_a_real_saver_the_checkpoint_is_committed_with_its_manifest(tmp_path):
    saver = AsyncSaver(FsspecSaver(tmp_path, manifest=True, summarize=lambda checkpoint: {"global_step": 5}))
    saver({"w": torch.arange(4.0)}, "c_5.pt", {"priority": 5})
    saver.wait()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c_5.pt", "c_5.pt.manifest.json"]
    assert saver.path_of("c_5.pt") == str(tmp_path / "c_5.pt")  # the wrapped saver's attributes show through
    saver.remove("c_5.pt")
    saver.wait()
    assert list(tmp_path.iterdir()) == []


class _Wrapped(torch.Tensor):
    """A tensor subclass, as a DTensor is: the snapshot knows it by its object (a DTensor's own storage is empty)."""


def test_copies_of_tensors_known_by_object_never_go_to_another_tensor_that_took_a_freed_ones_id():
    # a sharded model's state_dict() makes new DTensors on each call; one_snapshot's copies outlive the first call's
    # state dict, whose tensors are freed: Python hands their ids to the next call's tensors
    copies: dict = {}
    for round_ in range(5):
        state = {f"w{i}": torch.full((i + 1 + round_,), float(round_)).as_subclass(_Wrapped) for i in range(30)}
        expected = {name: tensor.tolist() for name, tensor in state.items()}
        snapshot = cpu_snapshot(state, copies)
        assert {name: tensor.tolist() for name, tensor in snapshot.items()} == expected, f"round {round_}"
        del state, snapshot  # dropped, as Checkpoint drops them after the save


def test_snapshot_copies_containers_of_plain_values_and_keeps_their_subclasses_apart():
    """Lists and tuples of plain numbers (the RNG states: ~1250 ints a checkpoint) take a fast path; the snapshot is
    still a copy, equal to the state, and a container holding anything else (a tensor, an int subclass) is walked."""
    state = {"python": (3, tuple(range(625)), None), "numpy": ("MT19937", list(range(624)), 2, 0, 0.0)}
    snapshot = cpu_snapshot(state)
    assert snapshot == state
    assert snapshot["numpy"][1] is not state["numpy"][1]  # a list the training loop may change is copied
    tensor = torch.zeros(2)
    mixed = cpu_snapshot([1, tensor, 2])
    assert mixed[0] == 1 and mixed[2] == 2 and mixed[1] is not tensor and torch.equal(mixed[1], tensor)
