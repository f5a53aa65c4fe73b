"""AsyncSaver's snapshots of CUDA tensors into page-locked buffers: queued copies that still read the state as it was
at the call, buffers reused from one save to the next, and fresh copies for a save handler that may keep them."""

from __future__ import annotations

import pytest
import torch

from tracktrain.checkpoint.async_saver import AsyncSaver, PinnedStaging, cpu_snapshot
from tracktrain.checkpoint.savers import FsspecSaver

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def big_state() -> dict:
    # large enough that the copy is still running when the next kernel is queued
    return {"model": {"w": torch.randn(64, 2**20, device="cuda"), "b": torch.zeros(7, device="cuda")}, "step": 3}


def test_the_saved_file_holds_the_state_at_the_call_although_training_changes_it_at_once(tmp_path):
    saver = AsyncSaver(FsspecSaver(tmp_path, manifest=True))
    state = big_state()
    before = {name: value.cpu() for name, value in state["model"].items()}
    saver(state, "a.pt")
    state["model"]["w"].mul_(-1.0)  # the next optimizer step, queued right behind the copies
    state["model"]["b"].add_(1.0)
    saver.wait()
    loaded = torch.load(tmp_path / "a.pt", map_location="cpu", weights_only=True)
    assert torch.equal(loaded["model"]["w"], before["w"]) and torch.equal(loaded["model"]["b"], before["b"])
    assert loaded["step"] == 3

    saver(state, "b.pt")  # the second save reuses the buffers and holds the changed state
    saver.wait()
    loaded = torch.load(tmp_path / "b.pt", map_location="cpu", weights_only=True)
    assert torch.equal(loaded["model"]["w"], -before["w"]) and torch.equal(loaded["model"]["b"], before["b"] + 1)


def test_staging_reuses_its_page_locked_buffers_after_a_rewind_and_replaces_one_whose_shape_changed():
    staging = PinnedStaging()
    first = cpu_snapshot({"w": torch.ones(4, device="cuda"), "v": torch.ones(2, device="cuda")}, staging=staging)
    staging.copies_done()()
    assert first["w"].is_pinned() and torch.equal(first["w"], torch.ones(4))
    staging.rewind()
    second = cpu_snapshot(
        {"w": torch.full((4,), 2.0, device="cuda"), "v": torch.ones(3, device="cuda")}, staging=staging
    )
    staging.copies_done()()
    assert second["w"].data_ptr() == first["w"].data_ptr()  # the same buffer, now holding the new values
    assert torch.equal(second["w"], torch.full((4,), 2.0))
    assert second["v"].data_ptr() != first["v"].data_ptr() and second["v"].shape == (3,)


def test_a_save_handler_that_keeps_what_it_was_given_gets_fresh_copies_each_time():
    kept = {}

    class Keeping:
        def __call__(self, checkpoint, filename, metadata=None):
            kept[filename] = checkpoint

        def remove(self, filename):
            kept.pop(filename, None)

    saver = AsyncSaver(Keeping())
    weight = torch.zeros(5, device="cuda")
    saver({"w": weight}, "a.pt")
    weight.add_(1.0)
    saver({"w": weight}, "b.pt")
    saver.wait()
    assert torch.equal(kept["a.pt"]["w"], torch.zeros(5)) and torch.equal(kept["b.pt"]["w"], torch.ones(5))
