"""FastaiLRFinder (`tracktrain.handlers.lr_finder`): Ignite 0.5.5's sweep step for step (rates, smoothed losses,
divergence, suggestion), everything put back afterwards, and one suggestion rule shared with `lr_find`."""

from __future__ import annotations

import random
import warnings

import pytest
import torch

import tracktrain.engine as our_engine
import tracktrain.handlers as our_handlers
from tracktrain.handlers.lr_finder import FastaiLRFinder, steepest_descent
from tracktrain.tuning.lr_finder import LRFinderResult

ignite_engine = pytest.importorskip("ignite.engine")
ignite_handlers = pytest.importorskip("ignite.handlers")


def sweep(engine_module, handlers_module, groups: int, **attach):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    parameters = [{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 2e-4}]
    optimizer = torch.optim.SGD(parameters[:groups] if groups == 2 else model.parameters(), lr=1e-4, momentum=0.9)
    x = torch.randn(256, 8)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    data = [(x[i : i + 16], y[i : i + 16]) for i in range(0, 256, 16)]
    trainer = engine_module.create_supervised_trainer(model, optimizer, torch.nn.CrossEntropyLoss())
    finder = handlers_module.FastaiLRFinder()
    before = [p.detach().clone() for p in model.parameters()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with finder.attach(trainer, {"model": model, "optimizer": optimizer}, **attach) as finding:
            finding.run(data, max_epochs=3)
    restored = all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    return finder, restored, [g["lr"] for g in optimizer.param_groups], trainer


def flat(values):
    return [v for item in values for v in (item if isinstance(item, list) else [item])]


@pytest.mark.parametrize(
    ("groups", "attach"),
    [
        (1, dict(diverge_th=2.0)),
        (1, dict(step_mode="linear", num_iter=60, end_lr=1.0)),
        (2, dict(step_mode="linear", start_lr=[1e-4, 1e-3], end_lr=[1.0, 2.0], diverge_th=1.5)),
        (2, dict(smooth_f=0.0, end_lr=10.0, num_iter=30)),
    ],
)
def test_the_sweep_and_suggestion_are_ignites(groups, attach):
    theirs, their_restored, their_lrs, _ = sweep(ignite_engine, ignite_handlers, groups, **attach)
    ours, restored, lrs, trainer = sweep(our_engine, our_handlers, groups, **attach)
    mine, their = ours.get_results(), theirs.get_results()
    assert len(mine["lr"]) == len(their["lr"]) > 3
    assert flat(mine["lr"]) == pytest.approx(flat(their["lr"]))
    assert mine["loss"] == pytest.approx(their["loss"], rel=1e-5)
    assert flat([ours.lr_suggestion()]) == pytest.approx(flat([theirs.lr_suggestion()]))
    assert restored and their_restored and lrs == their_lrs
    assert trainer.state.iteration == 0  # the trainer's state too


def test_the_suggestion_rule_is_ignites_on_any_curve_and_lr_find_uses_it():
    from ignite.handlers.lr_finder import FastaiLRFinder as IgniteFinder

    rng = random.Random(5)
    for _ in range(200):
        n = rng.randint(4, 40)
        lrs = [1e-5 * (10 ** (6 * i / n)) for i in range(n)]
        losses = [rng.random() + (i - n / 2) ** 2 / n for i in range(n)]
        ignite_finder = IgniteFinder()
        ignite_finder._history = {"lr": lrs, "loss": losses}
        try:
            expected = ignite_finder.lr_suggestion()
        except RuntimeError:
            with pytest.raises(RuntimeError, match="unexpected curve shape"):
                steepest_descent(lrs, losses)
            continue
        assert steepest_descent(lrs, losses) == expected
        # lr_find's result: the same rule, after its skips
        assert LRFinderResult(lrs, losses, losses, "exponential").suggestion(0, 0) == expected


def test_apply_plot_and_warn():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    finder, _, _, _ = sweep(our_engine, our_handlers, 1, diverge_th=2.0)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    finder.apply_suggested_lr(optimizer)
    assert optimizer.param_groups[0]["lr"] == finder.lr_suggestion()
    assert finder.plot(skip_start=0, skip_end=1) is not None
    with pytest.raises(RuntimeError, match="number of parameter groups does not match"):
        finder.apply_suggested_lr(torch.optim.SGD([{"params": [torch.ones(1)]}, {"params": [torch.ones(1)]}], lr=1))
    # a sweep that never diverges says so, as Ignite's
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
    trainer = our_engine.create_supervised_trainer(model, optimizer, torch.nn.MSELoss())
    with pytest.warns(UserWarning, match="Run completed without loss diverging"):
        with FastaiLRFinder().attach(trainer, {"model": model, "optimizer": optimizer}, end_lr=1e-5) as finding:
            finding.run([(torch.ones(4, 2), torch.ones(4, 1))] * 4)


@pytest.mark.parametrize(
    ("to_save", "kwargs", "error", "match"),
    [
        ([], {}, TypeError, "Argument to_save should be a mapping"),
        ({"model": torch.nn.Linear(1, 1)}, {}, ValueError, "should contain 'optimizer' key"),
        ({"optimizer": object()}, {}, TypeError, "should have `state_dict` method"),
        (None, {"smooth_f": 1.0}, ValueError, "smooth_f is outside the range"),
        (None, {"diverge_th": 0.5}, ValueError, "diverge_th should be larger than 1"),
        (None, {"step_mode": "cos"}, ValueError, "step_mode should be 'exp' or 'linear'"),
        (None, {"num_iter": 0}, ValueError, "num_iter should be positive"),
        (None, {"start_lr": 1.0, "end_lr": 0.1}, ValueError, "start_lr must be less than end_lr"),
        (None, {"end_lr": [1.0, 2.0]}, ValueError, "Number of values of end_lr should be equal"),
        (None, {"end_lr": 3}, TypeError, "end_lr should be a float or list of floats"),
    ],
)
def test_bad_arguments_are_refused_with_ignites_words(to_save, kwargs, error, match):
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = our_engine.create_supervised_trainer(model, optimizer, torch.nn.MSELoss())
    with pytest.raises(error, match=match):
        with FastaiLRFinder().attach(
            trainer, {"model": model, "optimizer": optimizer} if to_save is None else to_save, **kwargs
        ):
            pass
    with pytest.raises(RuntimeError, match="didn't run yet"):
        FastaiLRFinder().lr_suggestion()
