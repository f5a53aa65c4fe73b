"""The one training step: its accumulation windows, its refusal of a loss, and the schedule seam of ModelEngine."""

from __future__ import annotations

import torch
from torch import nn

from tracktrain.engine import Engine
from tracktrain.engine.model_engine import ModelEngine
from tracktrain.engine.schedule import NonPipelineSchedule
from tracktrain.engine.training_step import EpochWindows, IterationWindows, TrainingStep


def _windows_over(windows, epoch_length: int, epochs: int) -> list[tuple[int, bool, bool]]:
    seen = []
    engine = Engine(lambda e, b: seen.append((e.state.iteration, windows.starts(e), windows.ends(e))))
    engine.run(range(epoch_length), max_epochs=epochs)
    return seen


def test_ignite_windows_count_the_runs_iterations_across_epoch_ends():
    seen = _windows_over(IterationWindows(2), epoch_length=3, epochs=2)
    assert [(start, end) for _, start, end in seen] == [
        (True, False),
        (False, True),
        (True, False),  # epoch 1: its last batch opens a window ...
        (False, True),
        (True, False),
        (False, True),  # ... that epoch 2's first batch closes
    ]


def test_trainer_windows_start_at_each_epoch_and_its_last_batch_ends_one():
    seen = _windows_over(EpochWindows(2), epoch_length=3, epochs=2)
    assert [(start, end) for _, start, end in seen] == [
        (True, False),
        (False, True),
        (True, True),  # the short last window is stepped in its epoch
        (True, False),
        (False, True),
        (True, True),
    ]


def _step(accept_loss=None, windows=None):
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    model_engine = ModelEngine(model, torch.optim.SGD(model.parameters(), lr=0.1))
    stepped = []
    step = TrainingStep(
        model_engine,
        lambda engine, batch: model(batch).pow(2).mean(),
        windows=windows,
        accept_loss=accept_loss,
        on_optimizer_step=lambda: stepped.append(True),
    )
    return model, step, stepped


def test_a_refused_loss_skips_its_windows_step_but_the_step_is_still_counted():
    model, step, stepped = _step(accept_loss=lambda loss: False)
    before = [p.detach().clone() for p in model.parameters()]
    Engine(step).run([torch.ones(2, 3)] * 3, max_epochs=1)
    assert stepped == [True] * 3
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())  # nothing backpropagated


def test_accumulated_batches_step_as_one_batch_of_their_concatenation():
    batches = [torch.randn(2, 3, generator=torch.Generator().manual_seed(i)) for i in range(4)]
    model, step, stepped = _step(windows=IterationWindows(2))
    Engine(step).run(batches, max_epochs=1)
    reference, whole, _ = _step()
    Engine(whole).run([torch.cat(batches[:2]), torch.cat(batches[2:])], max_epochs=1)
    assert len(stepped) == 2
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours, theirs)


class _CountingSchedule(NonPipelineSchedule):
    uses_pipeline = True  # as a pipeline schedule would say

    def __init__(self) -> None:
        self.calls = 0

    def forward_backward_step(self, model_engine, data_iter, **kwargs):
        self.calls += 1
        return super().forward_backward_step(model_engine, data_iter, **kwargs)


def test_model_engine_runs_the_schedule_it_is_given():
    schedule = _CountingSchedule()
    model = nn.Linear(3, 1)
    model_engine = ModelEngine(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.MSELoss(), schedule=schedule)
    assert model_engine.schedule is schedule and model_engine.uses_pipeline
    output, label, loss = model_engine.execute_schedule(iter([(torch.ones(2, 3), torch.zeros(2, 1))]))
    assert schedule.calls == 1 and output.shape == (2, 1) and loss.requires_grad
    assert model.weight.grad is not None  # backward ran
    assert not ModelEngine(model).uses_pipeline
