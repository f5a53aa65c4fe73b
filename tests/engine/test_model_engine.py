"""ModelEngine: Colossal-AI's Engine (one implementation of a step) with AMP, clipping, handlers and ophooks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracktrain
from tracktrain.engine import BaseOpHook, ModelEngine, initialize


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))


def _batches(n: int = 4, size: int = 8):
    generator = torch.Generator().manual_seed(1)
    return [
        (torch.randn(size, 8, generator=generator), torch.randint(0, 3, (size,), generator=generator)) for _ in range(n)
    ]


def test_the_seed_example_runs_as_written_and_matches_a_hand_written_loop():
    batches = _batches()
    model, criterion = _model(), nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters())
    engine, dataloader, _, _ = tracktrain.initialize(model, optimizer, criterion, batches)
    # from the seed, apart from imports
    engine.train()
    for img, label in dataloader:
        engine.zero_grad()
        output = engine(img)
        loss = engine.criterion(output, label)
        engine.backward(loss)
        engine.step()

    reference = _model()
    reference_optimizer = torch.optim.Adam(reference.parameters())
    for img, label in batches:
        reference_optimizer.zero_grad()
        criterion(reference(img), label).backward()
        reference_optimizer.step()
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        assert torch.equal(ours, theirs)


def test_step_runs_gradient_handlers_then_clipping_then_the_optimizer():
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    order = []

    class AllReduceStandIn:
        def handle_gradient(self):
            # a real handler would all-reduce; doubling the gradients shows clipping sees the handled ones
            order.append("handler")
            for p in model.parameters():
                p.grad.mul_(2)

    optimizer.register_step_pre_hook(
        lambda opt, args, kwargs: order.append(
            ("step", torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()])).item())
        )
    )
    engine = ModelEngine(
        model,
        optimizer,
        nn.CrossEntropyLoss(),
        gradient_handlers=[AllReduceStandIn(), lambda: order.append("callable handler")],
        clip_grad_norm=0.25,
    )
    x, y = _batches(1)[0]
    engine.zero_grad()
    engine.backward(engine.criterion(engine(x), y))
    engine.step()
    assert order[:2] == ["handler", "callable handler"]
    assert order[2][0] == "step" and order[2][1] <= 0.25 + 1e-5


def test_clip_by_value():
    model = _model()
    engine = ModelEngine(
        model, torch.optim.SGD(model.parameters(), lr=0.0), nn.CrossEntropyLoss(), clip_grad_value=1e-3
    )
    x, y = _batches(1)[0]
    engine.backward(100 * engine.criterion(engine(x), y))
    engine.step()
    assert max(p.grad.abs().max().item() for p in model.parameters()) <= 1e-3 * (1 + 1e-6)  # float32 of 1e-3


def test_fp16_scaler_skips_an_inf_step_and_bf16_autocast_runs_forward_and_loss_in_low_precision():
    model = _model()
    before = [p.clone() for p in model.parameters()]
    scaler = torch.amp.GradScaler("cpu")
    engine = ModelEngine(
        model, torch.optim.SGD(model.parameters(), lr=0.1), nn.MSELoss(), scaler=scaler, autocast_dtype=torch.float16
    )
    x = torch.randn(4, 8)
    output = engine(x)
    assert output.dtype == torch.float16
    engine.backward(engine.criterion(output.float(), torch.full((4, 3), float("inf"))))
    engine.step()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters())), "an inf step must be skipped"
    assert scaler.get_scale() == 2.0**15

    bf16 = ModelEngine(_model(), None, nn.CrossEntropyLoss(), autocast_dtype=torch.bfloat16)
    assert bf16(x).dtype == torch.bfloat16
    assert "autocast" in repr(bf16.criterion)


def test_backward_by_grad_equals_backward_of_the_loss():
    x, y = _batches(1)[0]
    a, b = _model(), _model()
    engine_a = ModelEngine(a, torch.optim.SGD(a.parameters(), lr=0.1), nn.CrossEntropyLoss())
    engine_a.backward(engine_a.criterion(engine_a(x), y))
    output = b(x)
    grad = torch.autograd.grad(nn.CrossEntropyLoss()(output, y), output, retain_graph=True)[0]
    ModelEngine(b, torch.optim.SGD(b.parameters(), lr=0.1)).backward_by_grad(output, grad)
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


@pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")
def test_ophooks_run_around_every_module_and_can_be_removed():
    calls = []

    class Recorder(BaseOpHook):
        def pre_fwd_exec(self, module, *inputs):
            calls.append(("pre_fwd", type(module).__name__))

        def post_fwd_exec(self, module, *inputs):
            calls.append(("post_fwd", type(module).__name__))

        def pre_bwd_exec(self, module, grad_output):
            calls.append(("pre_bwd", type(module).__name__))

        def post_bwd_exec(self, module, grad_input):
            calls.append(("post_bwd", type(module).__name__))

        def post_iter(self):
            calls.append(("post_iter", None))

    model = _model()
    hook = Recorder()
    # torch warns that the outermost module's backward hook sees module outputs (its inputs need no grad)
    engine = ModelEngine(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(), ophook_list=[hook])
    assert engine.ophooks == [hook]
    x, y = _batches(1)[0]
    engine.backward(engine.criterion(engine(x), y))
    engine.step()
    kinds = [kind for kind, _ in calls]
    assert calls[0] == ("pre_fwd", "Sequential") and kinds.count("pre_fwd") == 4 and kinds.count("post_fwd") == 4
    assert kinds.count("pre_bwd") >= 3 and kinds.count("post_bwd") >= 3 and calls[-1] == ("post_iter", None)

    engine.remove_hook(hook)
    calls.clear()
    engine.backward(engine.criterion(engine(x), y))
    engine.step()
    assert calls == [] and engine.ophooks == []
    with pytest.raises(ValueError, match="not an ophook"):
        engine.remove_hook(hook)


def test_execute_schedule_returns_output_label_and_loss():
    model = _model()
    engine = ModelEngine(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss())
    batches = _batches(2)
    output, label, loss = engine.execute_schedule(iter(batches))
    assert output.shape == (8, 3) and torch.equal(label, batches[0][1]) and loss.ndim == 0
    assert all(p.grad is not None for p in model.parameters())
    output, label, loss = engine.execute_schedule(iter(batches[1:]), forward_only=True, return_loss=False)
    assert loss is None
    with pytest.raises(ValueError, match=r"expects \(inputs, targets\) batches"):
        engine.execute_schedule(iter([torch.ones(3)]))


def test_create_supervised_trainer_steps_through_a_model_engine():
    from tracktrain.engine import create_supervised_trainer

    model = _model()
    trainer = create_supervised_trainer(
        model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(), clip_grad_norm=1.0
    )
    model_engine = trainer._process_function.model_engine
    assert isinstance(model_engine, ModelEngine) and model_engine.clip_grad_norm == 1.0


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"model": "net"}, TypeError, "needs a torch.nn.Module"),
        ({"optimizer": "sgd"}, TypeError, "optimizer must be a torch.optim.Optimizer"),
        ({"criterion": 3}, TypeError, "criterion must be callable"),
        ({"clip_grad_norm": -1}, ValueError, "clip_grad_norm must be a number >= 0"),
        ({"scaler": True}, TypeError, "scaler must be a torch.amp.GradScaler"),
        ({"autocast_dtype": torch.float64}, ValueError, "autocast_dtype must be"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    arguments = {"model": _model(), **kwargs}
    with pytest.raises(error, match=match):
        ModelEngine(**arguments)


def test_step_without_optimizer_is_a_clear_error():
    with pytest.raises(RuntimeError, match=r"step\(\) needs an optimizer"):
        ModelEngine(_model()).step()
    with pytest.raises(TypeError, match="subclass tracktrain.engine.BaseOpHook"):
        ModelEngine(_model()).add_hook(object())
    assert initialize(_model(), torch.optim.SGD(_model().parameters(), lr=0.1))[1:] == (None, None, None)


def test_an_attached_engine_gets_every_step_event_in_order_with_the_loss_and_the_optimizer():
    """Each StepEvent is fired under its own name's key (the hot path passes the key, not the event): a handler of
    each runs once per backward/step, in order, seeing `step_loss` and `step_optimizer`."""
    from tracktrain.engine import Engine
    from tracktrain.engine.model_engine import StepEvents

    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model_engine = ModelEngine(model, optimizer, nn.CrossEntropyLoss())
    engine = Engine(lambda engine, batch: None)
    model_engine.attach(engine)
    seen: list[tuple[str, object]] = []
    for event in StepEvents:
        engine.add_event_handler(
            event,
            lambda e, name=event.name: seen.append(
                (name, e.state.step_loss if "BACKWARD" in name else e.state.step_optimizer)
            ),
        )
    (x, y), *_ = _batches(1)
    loss = model_engine.criterion(model_engine(x), y)
    model_engine.backward(loss)
    model_engine.step()
    assert seen == [
        ("BACKWARD_STARTED", loss),
        ("BACKWARD_COMPLETED", loss),
        ("OPTIMIZER_STEP_STARTED", optimizer),
        ("OPTIMIZER_STEP_COMPLETED", optimizer),
    ]
    assert engine.last_event_name is StepEvents.OPTIMIZER_STEP_COMPLETED
