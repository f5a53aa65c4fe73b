"""`tracktrain.colossal.nn`: the LR schedulers give Colossal-AI's learning rates step by step (its formulas, written
out here), the optimizers torch's updates, `metric.Accuracy` the count of correct predictions; and the Trainer calls
the model and criterion as Colossal-AI's schedule does."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from tracktrain.colossal import initialize
from tracktrain.colossal.nn import lr_scheduler as schedulers
from tracktrain.colossal.nn.metric import Accuracy


def _lrs(make, steps, lr=1.0):
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr)
    scheduler = make(optimizer)
    values = [optimizer.param_groups[0]["lr"]]
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
        values.append(optimizer.param_groups[0]["lr"])
    return values


def _cosine(step, total, base=1.0, eta_min=0.0):
    return eta_min + (base - eta_min) * (1 + math.cos(math.pi * step / total)) / 2


def test_cosine_annealing_warmup_warms_up_linearly_then_anneals_from_the_full_rate():
    values = _lrs(lambda o: schedulers.CosineAnnealingWarmupLR(o, total_steps=10, warmup_steps=4), 10)
    expected = [(step + 1) / 4 for step in range(4)] + [_cosine(step, 6) for step in range(7)]
    assert values == pytest.approx(expected)


def test_linear_warmup_lr_has_colossal_ais_shape_also_past_a_short_schedule():
    values = _lrs(lambda o: schedulers.LinearWarmupLR(o, total_steps=10, warmup_steps=3), 10)
    expected = [(step + 1) / 4 for step in range(3)] + [(10 - step) / 7 for step in range(3, 11)]
    assert values == pytest.approx(expected)
    # ColossalAI-Examples' ViT steps it by epoch, 2 epochs into a 50-step warm-up: it stays warming up
    assert _lrs(lambda o: schedulers.LinearWarmupLR(o, total_steps=2, warmup_steps=50), 2) == pytest.approx(
        [1 / 51, 2 / 51, 3 / 51]
    )


def test_cosine_polynomial_multistep_and_flat_schedules():
    assert _lrs(lambda o: schedulers.CosineAnnealingLR(o, total_steps=5), 5) == pytest.approx(
        [_cosine(step, 5) for step in range(6)]
    )
    poly = _lrs(lambda o: schedulers.PolynomialLR(o, total_steps=4, end_lr=0.2, power=2.0), 5)
    assert poly == pytest.approx([0.8 * (1 - min(step, 4) / 4) ** 2 + 0.2 for step in range(6)])
    multi = _lrs(lambda o: schedulers.MultiStepWarmupLR(o, total_steps=10, warmup_steps=2, milestones=[4, 6]), 7)
    assert multi == pytest.approx([0.5, 1.0, 1.0, 1.0, 0.1, 0.1, 0.01, 0.01])
    flat = _lrs(lambda o: schedulers.FlatAnnealingLR(o, total_steps=10, pct_start=0.5), 10)
    assert flat == pytest.approx([1.0] * 5 + [_cosine(step, 5) for step in range(6)])


def test_a_scheduler_refuses_an_argument_colossal_ai_would_drop():
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'warmup'"):
        schedulers.CosineAnnealingLR(optimizer, total_steps=10, warmup=2)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match=r"total_steps=...\) must be a whole number of steps"):
        schedulers.CosineAnnealingLR(optimizer, total_steps=-1)


def test_optimizers_take_torchs_update_and_refuse_what_torch_has_not():
    from tracktrain.colossal import nn as col_nn

    def updated(make):
        torch.manual_seed(0)
        weight = nn.Parameter(torch.randn(3))
        optimizer = make([weight])
        for _ in range(3):
            optimizer.zero_grad()
            (weight**2).sum().backward()
            optimizer.step()
        return weight.detach()

    torch.testing.assert_close(
        updated(lambda p: col_nn.FusedAdam(p, lr=0.1, weight_decay=0.1)),
        updated(lambda p: torch.optim.AdamW(p, lr=0.1, weight_decay=0.1)),
    )
    torch.testing.assert_close(
        updated(lambda p: col_nn.HybridAdam(p, lr=0.1, weight_decay=0.1, adamw_mode=False)),
        updated(lambda p: torch.optim.Adam(p, lr=0.1, weight_decay=0.1)),
    )
    torch.testing.assert_close(
        updated(lambda p: col_nn.FusedSGD(p, lr=0.1, momentum=0.9)),
        updated(lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
    )
    with pytest.raises(ImportError, match="torch has no LAMB optimizer"):
        from tracktrain.colossal.nn import Lamb  # noqa: F401
    with pytest.raises(ValueError, match="bias_correction=False"):
        col_nn.FusedAdam([nn.Parameter(torch.zeros(1))], bias_correction=False)


def test_accuracy_counts_the_correct_predictions():
    logits = torch.tensor([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]])
    assert int(Accuracy()(logits, torch.tensor([1, 1, 1]))) == 2


def test_the_trainer_calls_model_and_criterion_as_colossal_ais_schedule(tmp_path, monkeypatch):
    """A tuple of inputs is the model's arguments, a tuple of outputs the criterion's first ones (SimCLR's)."""
    from tracktrain.colossal.registry import LOSSES
    from tracktrain.colossal.trainer import Trainer, hooks

    class TwoViews(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.Linear(3, 2)

        def forward(self, x1, x2):
            return self.encoder(x1), self.encoder(x2)

    @LOSSES.register_module
    class Agreement(nn.Module):
        def forward(self, z1, z2, label):
            return ((z1 - z2) ** 2).mean() + 0 * label.sum()

    assert LOSSES.get_module("Agreement") is Agreement
    monkeypatch.chdir(tmp_path)
    model = TwoViews()
    engine, *_ = initialize(model, torch.optim.SGD(model.parameters(), lr=0.1), Agreement(), verbose=False)
    data = [((torch.randn(4, 3), torch.randn(4, 3)), torch.zeros(4)) for _ in range(2)]
    trainer = Trainer(engine)
    trainer.fit(data, epochs=1, hooks=[hooks.LossHook()])
    assert trainer.cur_step == 2 and trainer.metrics["train_loss_avg"] > 0
