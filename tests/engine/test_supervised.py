"""Supervised steps: fp32, bf16/fp16 autocast with GradScaler on CPU, accumulation, clipping, evaluation."""

from __future__ import annotations

import copy
import importlib.util
from collections import namedtuple

import pytest
import torch
from torch import nn

from tracktrain.engine import (
    DeterministicEngine,
    Engine,
    Events,
    create_supervised_evaluator,
    create_supervised_trainer,
    supervised_training_step,
    supervised_training_step_apex,
    supervised_training_step_tpu,
)
from tracktrain.engine.supervised import convert_tensor


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def _batches(n: int, size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(size, 8, generator=generator), torch.randn(size, 1, generator=generator)) for _ in range(n)]


def test_training_reduces_the_loss_and_returns_a_detached_tensor():
    model = _model()
    trainer = create_supervised_trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.MSELoss())
    losses = []
    trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda e: losses.append(e.state.output))
    trainer.run([_batches(1, 32)[0]] * 50)
    assert all(isinstance(x, torch.Tensor) and not x.requires_grad for x in losses)
    assert losses[-1] < 0.5 * losses[0]


def test_gradient_accumulation_equals_one_step_on_the_concatenated_batch():
    batches = _batches(4, 16)
    accumulated, big = _model(), _model()
    trainer = create_supervised_trainer(
        accumulated, torch.optim.SGD(accumulated.parameters(), lr=0.5), nn.MSELoss(), gradient_accumulation_steps=4
    )
    steps = []
    trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda e: steps.append(accumulated[0].weight.clone()))
    trainer.run(batches)

    optimizer = torch.optim.SGD(big.parameters(), lr=0.5)
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    nn.MSELoss()(big(x), y).backward()
    optimizer.step()

    # no update before the 4th iteration, then the same update as the large batch
    assert all(torch.equal(w, _model()[0].weight) for w in steps[:3])
    for p_acc, p_big in zip(accumulated.parameters(), big.parameters()):
        torch.testing.assert_close(p_acc, p_big, rtol=1e-5, atol=1e-6)


def test_reported_loss_under_accumulation_is_the_unscaled_batch_loss():
    model = _model()
    batch = _batches(1, 16)[0]
    expected = nn.MSELoss()(model(batch[0]), batch[1]).detach()
    trainer = create_supervised_trainer(
        model, torch.optim.SGD(model.parameters(), lr=0.0), nn.MSELoss(), gradient_accumulation_steps=3
    )
    torch.testing.assert_close(trainer.run([batch]).output, expected)


def test_bf16_autocast_on_cpu_runs_the_forward_in_bf16_and_keeps_fp32_weights():
    model = _model()
    before = copy.deepcopy(model)
    dtypes = []
    trainer = create_supervised_trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        nn.MSELoss(),
        amp_mode="amp",
        output_transform=lambda x, y, y_pred, loss: (dtypes.append(y_pred.dtype), loss.detach())[1],
    )
    trainer.run(_batches(3, 8))
    assert dtypes == [torch.bfloat16] * 3
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert not torch.equal(model[0].weight, before[0].weight)
    assert not hasattr(trainer.state, "scaler")  # bf16 needs no scaler


def test_fp16_with_grad_scaler_on_cpu_skips_steps_with_inf_gradients_and_backs_off():
    model = _model()
    loss_fn = nn.MSELoss()
    poison = {"on": False}

    def maybe_inf_loss(y_pred, y):
        loss = loss_fn(y_pred.float(), y)
        return loss * float("inf") if poison["on"] else loss

    trainer = create_supervised_trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        maybe_inf_loss,
        amp_mode="amp",
        scaler=True,
        amp_dtype=torch.float16,
    )
    scaler = trainer.state.scaler
    assert isinstance(scaler, torch.amp.GradScaler)
    initial_scale = scaler.get_scale()

    @trainer.on(Events.ITERATION_STARTED(once=3))
    def poison_third_step(engine):
        poison["on"] = True
        engine.state.weights_before_poison = model[0].weight.clone()

    @trainer.on(Events.ITERATION_COMPLETED(once=3))
    def check_skipped(engine):
        poison["on"] = False
        assert torch.equal(model[0].weight, engine.state.weights_before_poison), "an inf step must be skipped"
        engine.state.scale_after_inf = scaler.get_scale()

    trainer.run(_batches(4, 8))
    assert trainer.state.scale_after_inf == initial_scale / 2
    assert "scale" in scaler.state_dict()  # checkpointable


@pytest.mark.parametrize("amp", [False, True])
def test_clip_grad_norm_clips_the_true_gradients(amp):
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    norms = []

    def record_norm(opt, args, kwargs):
        grads = [p.grad for group in opt.param_groups for p in group["params"] if p.grad is not None]
        norms.append(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item())

    optimizer.register_step_pre_hook(record_norm)
    # a small initial scale so that no step overflows and is skipped
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0)
    amp_args = {"amp_mode": "amp", "scaler": scaler, "amp_dtype": torch.float16} if amp else {}
    trainer = create_supervised_trainer(
        model, optimizer, lambda p, y: 1000 * nn.MSELoss()(p.float(), y), clip_grad_norm=0.5, **amp_args
    )
    trainer.run(_batches(3, 8))
    assert len(norms) == 3 and all(n <= 0.5 + 1e-4 for n in norms)


def test_matches_ignite_create_supervised_trainer_exactly():
    ignite_engine = pytest.importorskip("ignite.engine")
    ours, theirs = _model(), _model()
    batches = _batches(6, 8)
    create_supervised_trainer(
        ours, torch.optim.Adam(ours.parameters(), lr=0.01), nn.MSELoss(), gradient_accumulation_steps=2
    ).run(batches, max_epochs=2)
    ignite_engine.create_supervised_trainer(
        theirs, torch.optim.Adam(theirs.parameters(), lr=0.01), nn.MSELoss(), gradient_accumulation_steps=2
    ).run(batches, max_epochs=2)
    for a, b in zip(ours.parameters(), theirs.parameters()):
        assert torch.equal(a, b)


def test_evaluator_returns_predictions_and_targets_without_gradients_and_attaches_metrics():
    model = _model()
    attached = []

    class CountingMetric:
        def attach(self, engine, name):
            attached.append(name)
            engine.add_event_handler(Events.ITERATION_COMPLETED, lambda e: setattr(e.state, "last", e.state.output))

    evaluator = create_supervised_evaluator(model, metrics={"count": CountingMetric()})
    batch = _batches(1, 4)[0]
    state = evaluator.run([batch])
    y_pred, y = state.last
    assert attached == ["count"] and not model.training
    assert not y_pred.requires_grad and torch.equal(y, batch[1])
    torch.testing.assert_close(y_pred, model(batch[0]).detach())
    with pytest.raises(TypeError, match="attach"):
        create_supervised_evaluator(model, metrics={"bad": 3})


def test_evaluator_amp_runs_under_autocast():
    model = _model()
    state = create_supervised_evaluator(model, amp_mode="amp").run([_batches(1, 4)[0]])
    assert state.output[0].dtype == torch.bfloat16


def test_trainer_switches_an_evaluated_model_back_to_train_mode():
    model = _model()
    modes = []
    trainer = create_supervised_trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        nn.MSELoss(),
        output_transform=lambda x, y, y_pred, loss: modes.append(model.training),
    )
    evaluator = create_supervised_evaluator(model)
    trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda e: evaluator.run([_batches(1, 2)[0]]))
    trainer.run(_batches(3, 4))
    assert modes == [True, True, True]
    assert not model.training  # the evaluator ran last


def test_model_fn_model_transform_prepare_batch_and_device():
    model = _model()
    calls = []
    step = supervised_training_step(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        nn.MSELoss(),
        device="cpu",
        prepare_batch=lambda batch, device, non_blocking: (batch["x"], batch["y"]),
        model_fn=lambda m, x: {"out": m(x)},
        model_transform=lambda output: (calls.append("transform"), output["out"])[1],
    )
    batch = _batches(1, 4)[0]
    Engine(step).run([{"x": batch[0], "y": batch[1]}])
    assert calls == ["transform"]


def test_convert_tensor_keeps_structure():
    Pair = namedtuple("Pair", "a b")
    value = {"x": [torch.ones(2), (torch.zeros(1), 3)], "p": Pair(torch.ones(1), "s")}
    moved = convert_tensor(value, "cpu")
    assert isinstance(moved["p"], Pair) and moved["p"].b == "s" and moved["x"][1][1] == 3
    assert torch.equal(moved["x"][0], torch.ones(2))


def test_deterministic_flag_builds_a_deterministic_engine():
    model = _model()
    trainer = create_supervised_trainer(
        model, torch.optim.SGD(model.parameters(), lr=0.1), nn.MSELoss(), deterministic=True
    )
    assert isinstance(trainer, DeterministicEngine)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"gradient_accumulation_steps": 0},
            ValueError,
            "Gradient_accumulation_steps must be strictly positive.*Got 0",
        ),
        ({"clip_grad_norm": -1.0}, ValueError, "clip_grad_norm must be a positive number"),
        ({"amp_mode": "fp8"}, ValueError, "amp_mode must be None or 'amp', got 'fp8'"),
        ({"amp_mode": "apex"}, ValueError, "apex is not supported.*amp_mode='amp'"),
        ({"scaler": True}, ValueError, "scaler argument is True, but amp_mode is None. Consider using amp_mode='amp'"),
        ({"amp_mode": "amp", "amp_dtype": torch.float64}, ValueError, "amp_dtype must be"),
        ({"amp_mode": "amp", "scaler": "yes"}, TypeError, "scaler must be a torch.amp.GradScaler"),
    ],
)
def test_bad_trainer_arguments(kwargs, error, match):
    model = _model()
    with pytest.raises(error, match=match):
        create_supervised_trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.MSELoss(), **kwargs)


def test_bad_batch_layout_says_how_to_fix_it():
    model = _model()
    trainer = create_supervised_trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.MSELoss())
    with pytest.raises(ValueError, match="expects \\(inputs, targets\\) batches.*length 3.*prepare_batch"):
        trainer.run([(torch.ones(1, 8), torch.ones(1, 1), "extra")])


def test_apex_step_points_to_native_amp():
    with pytest.raises(NotImplementedError, match="amp_mode='amp'"):
        supervised_training_step_apex(None, None, None)


@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is not None, reason="torch_xla is installed")
def test_tpu_step_without_torch_xla_says_how_to_install_it_in_ignites_words_first():
    from ignite.engine import supervised_training_step_tpu as ignite_step

    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ModuleNotFoundError) as ignite_error:
        ignite_step(model, optimizer, nn.MSELoss())
    with pytest.raises(ModuleNotFoundError, match="needs it: install the torch_xla release.*pip install") as ours:
        supervised_training_step_tpu(model, optimizer, nn.MSELoss())
    assert str(ours.value).startswith(str(ignite_error.value))
