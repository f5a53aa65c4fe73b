"""Mixed precision on CUDA: "16-mixed" runs the forward in float16 under a GradScaler that skips a step whose
gradients are not finite, counts it, halves its scale and trains on; "bf16-mixed" runs the forward in bfloat16
without a scaler, the weights staying float32. (tests/trainer/test_precision.py proves the same on the CPU.)"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tracktrain import Trainer

from ._tasks import Net, make_loader, quiet

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

EPOCHS = 4
STEPS = EPOCHS * 8  # 64 samples, 8 per batch
POISONED = 11  # the optimizer step (counting from 1) whose gradients are made infinite


class PoisonOneStep(Net):
    """Makes one weight's gradient infinite after the backward of step `at`; records, around every step, whether
    the weights changed and the GradScaler's scale."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at
        self.step = 0
        self.before: torch.Tensor | None = None
        self.changed: list[bool] = []
        self.scales: list[tuple[float, float]] = []  # (before the step, after it)
        self.grad_dtypes: set[torch.dtype] = set()

    def on_train_batch_start(self, batch, batch_idx):
        self.step += 1
        self.before = self.net[0].weight.detach().clone()
        self.scale_before = self.trainer.model_engine.scaler.get_scale()  # a sync: fine in a test

    def on_after_backward(self):
        self.grad_dtypes.add(self.net[0].weight.grad.dtype)
        if self.step == self.at:
            self.net[0].weight.grad[0, 0] = float("inf")

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.changed.append(not torch.equal(self.before, self.net[0].weight))
        self.scales.append((self.scale_before, self.trainer.model_engine.scaler.get_scale()))


def test_fp16_skips_the_step_with_infinite_gradients_counts_it_halves_the_scale_and_trains_on(tmp_path):
    module = PoisonOneStep(at=POISONED)
    trainer = Trainer(**quiet(tmp_path, max_epochs=EPOCHS, precision="16-mixed", log_every_n_steps=4))
    trainer.fit(module, make_loader())

    assert trainer.device.type == "cuda" and module.net[0].weight.is_cuda
    # the forward ran under CUDA autocast in float16; the master weights and their gradients stay float32
    assert all(seen["autocast"] and seen["autocast_dtype"] == torch.float16 for seen in module.seen)
    assert {seen["output_dtype"] for seen in module.seen} == {torch.float16}
    assert {seen["parameter_dtype"] for seen in module.seen} == {torch.float32}
    assert module.grad_dtypes == {torch.float32}
    scaler = trainer.model_engine.scaler
    assert isinstance(scaler, torch.amp.GradScaler) and scaler.is_enabled()

    # exactly the poisoned step was skipped (a small net's scaled gradients never overflow float16 by themselves),
    # the weights left as they were, and it was counted, on the engine and in what was logged
    assert len(module.changed) == STEPS
    assert [step for step, changed in enumerate(module.changed, start=1) if not changed] == [POISONED]
    assert trainer.model_engine.skipped_steps == 1
    assert trainer.logged_metrics["amp/skipped_steps"] == 1
    # the scale halved at that step and only there (growth comes after 2000 clean steps)
    before, after = module.scales[POISONED - 1]
    assert after == before / 2
    assert all(b == a for step, (b, a) in enumerate(module.scales, start=1) if step != POISONED)

    # and training went on: every weight finite, the loss finite and lower at the end than at the start
    assert all(torch.isfinite(p).all() for p in module.parameters())
    losses = module.loss_values()
    assert all(math.isfinite(loss) for loss in losses)
    assert sum(losses[-8:]) < 0.8 * sum(losses[:8]), losses
    assert trainer.global_step == STEPS


class GradientDtypes(Net):
    def __init__(self) -> None:
        super().__init__()
        self.grad_dtypes: set[torch.dtype] = set()

    def on_after_backward(self):
        self.grad_dtypes.update(p.grad.dtype for p in self.parameters() if p.grad is not None)


def test_bf16_runs_the_forward_in_bfloat16_without_a_scaler_and_trains(tmp_path):
    module = GradientDtypes()
    trainer = Trainer(**quiet(tmp_path, max_epochs=EPOCHS, precision="bf16-mixed"))
    trainer.fit(module, make_loader())

    assert trainer.device.type == "cuda"
    assert all(seen["autocast"] and seen["autocast_dtype"] == torch.bfloat16 for seen in module.seen)
    assert {seen["output_dtype"] for seen in module.seen} == {torch.bfloat16}
    assert {seen["parameter_dtype"] for seen in module.seen} == {torch.float32}
    assert {p.dtype for p in module.parameters()} == {torch.float32}
    assert module.grad_dtypes == {torch.float32}
    assert trainer.model_engine.scaler is None  # bfloat16 has float32's range: nothing to scale
    assert "amp/skipped_steps" not in trainer.logged_metrics

    losses = module.loss_values()
    assert len(losses) == STEPS and all(math.isfinite(loss) for loss in losses)
    assert sum(losses[-8:]) < 0.8 * sum(losses[:8]), losses


def test_an_ema_kept_on_the_cpu_averages_a_model_trained_on_cuda(tmp_path):
    """`EMA(device="cpu")`: the average stays in host memory, each update copies the weights there; validation
    swaps it into the CUDA module and back; at the end the CUDA module holds it."""
    from tracktrain.callbacks import EMA

    class Validated(Net):
        def eval_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", F.cross_entropy(self(x), y))

    ema = EMA(decay=0.5, device="cpu")
    module = Validated()
    trainer = Trainer(**quiet(tmp_path, max_epochs=2, callbacks=[ema]))
    trainer.fit(module, make_loader(), make_loader())

    averaged = [p.detach() for p in ema.averaged_model.module.parameters()]
    assert all(p.device.type == "cpu" for p in averaged)
    assert all(p.device.type == "cuda" for p in module.parameters())
    assert all(torch.equal(a, p.detach().cpu()) for a, p in zip(averaged, module.parameters()))
    assert math.isfinite(float(trainer.callback_metrics["val_loss"]))  # validated with the average swapped in
