"""The stall of an asynchronous checkpoint of CUDA tensors: `AsyncSaver` around a real saver returns once the copy
of the ~200 MB state to host memory is queued (into page-locked buffers pinned at its first save and reused), well
before a blocking save of the same state by the same kind of saver returns; the file it writes in the background
holds the state as it was at the call, though the tensors change on the device right after the call returns;
`wait()` returns once the file is written. (tests/cuda/test_pinned_snapshots.py covers the buffers themselves.)"""

from __future__ import annotations

import time

import pytest
import torch

from tracktrain.checkpoint.async_saver import AsyncSaver
from tracktrain.checkpoint.savers import DiskSaver
from tracktrain.checkpoint.state import read_checkpoint

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

TENSORS, ELEMENTS = 4, 12_500_000  # 4 float32 tensors of 50 MB: 200 MB


def _state() -> dict:
    generator = torch.Generator(device="cuda").manual_seed(0)
    tensors = [torch.randn(ELEMENTS, device="cuda", generator=generator) for _ in range(TENSORS)]
    return {"model": {f"w{i}": t for i, t in enumerate(tensors[:2])}, "moments": tensors[2:], "step": 7}


def _tensors(state: dict) -> list[torch.Tensor]:
    return [*state["model"].values(), *state["moments"]]


def test_an_async_save_of_cuda_tensors_returns_before_the_write_and_writes_the_state_of_the_call(tmp_path):
    state = _state()
    torch.cuda.synchronize()
    blocking = DiskSaver(tmp_path / "blocking")
    started = time.perf_counter()
    blocking(state, "state.pt")  # device-to-host copy, serialization, write and fsync, all in the loop
    blocking_seconds = time.perf_counter() - started

    saver = AsyncSaver(DiskSaver(tmp_path / "async"))
    saver(state, "first.pt")  # pins its host buffers, once: a run's later checkpoints reuse them
    assert saver.wait(timeout=300) is True
    at_the_call = [tensor.clone() for tensor in _tensors(state)]  # on the device
    torch.cuda.synchronize()
    started = time.perf_counter()
    saver(state, "state.pt")
    returned_seconds = time.perf_counter() - started
    assert saver.pending  # the write goes on in the background
    with torch.no_grad():  # training goes on: the next step changes the tensors in place, at once
        for tensor in _tensors(state):
            tensor.mul_(-1.0).add_(1.0)

    assert saver.wait(timeout=300) is True
    assert not saver.pending
    # the loop did not wait for the serialization and the write (the margin is wide, so that it cannot flake)
    assert returned_seconds < 0.5 * blocking_seconds, (returned_seconds, blocking_seconds)

    saved = read_checkpoint(tmp_path / "async" / "state.pt")  # as the library loads: onto the host
    assert saved["step"] == 7
    for tensor, expected in zip(_tensors(saved), at_the_call):
        assert tensor.device.type == "cpu"
        assert torch.equal(tensor, expected.cpu())
    for tensor, now in zip(_tensors(saved), _tensors(state)):
        assert not torch.equal(tensor, now.cpu())  # the device's tensors did change after the call
    reference = read_checkpoint(tmp_path / "blocking" / "state.pt")
    assert all(torch.equal(a, b) for a, b in zip(_tensors(reference), _tensors(saved)))
