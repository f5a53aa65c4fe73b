"""A loader with `pin_memory=True` feeding a fit on CUDA: the batches reach `train_step` on the GPU and training
works; the loader the Trainer rebuilds (to make batches reproducible by position) still pins them; and the
Trainer's host-to-device copy of a pinned batch is asynchronous (`non_blocking=True`, what
`tracktrain.engine.batches.move_to_device` promises), so the copy overlaps the step instead of stalling the host."""

from __future__ import annotations

import math

import pytest
import torch
from torch.overrides import TorchFunctionMode

from tracktrain import Trainer

from ._tasks import Net, make_loader, quiet

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


class HostToDeviceCopies(TorchFunctionMode):
    """Records every `Tensor.to(...)` of a host tensor onto a CUDA device: (pinned source, non_blocking)."""

    def __init__(self) -> None:
        super().__init__()
        self.copies: list[tuple[bool, bool]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", None) == "to" and args and isinstance(args[0], torch.Tensor):
            source = args[0]
            target = kwargs.get("device", next((a for a in args[1:] if isinstance(a, (str, torch.device))), None))
            if source.device.type == "cpu" and target is not None and torch.device(target).type == "cuda":
                non_blocking = kwargs.get("non_blocking", next((a for a in args[1:] if isinstance(a, bool)), False))
                self.copies.append((source.is_pinned(), bool(non_blocking)))
        return func(*args, **kwargs)


def test_pinned_batches_reach_train_step_on_the_gpu_through_an_asynchronous_copy(tmp_path):
    module = Net()
    trainer = Trainer(**quiet(tmp_path, max_epochs=3, loggers=False))
    copies = HostToDeviceCopies()
    with copies:
        trainer.fit(module, make_loader(shuffle=True, pin_memory=True))

    assert {seen["batch_device"].type for seen in module.seen} == {"cuda"}
    assert len(module.seen) == trainer.global_step == 24
    # every batch tensor (inputs and labels of 24 batches) came over from pinned memory, without waiting
    pinned = [non_blocking for is_pinned, non_blocking in copies.copies if is_pinned]
    assert len(pinned) >= 2 * 24, copies.copies
    assert all(pinned), copies.copies

    losses = module.loss_values()
    assert all(math.isfinite(loss) for loss in losses)
    assert sum(losses[-8:]) < 0.8 * sum(losses[:8]), losses
