"""Ignite's parameter schedulers (`tracktrain.handlers.param_scheduler`): the same values as Ignite 0.5.5's, event
by event, on an engine and simulated; a checkpoint of each resumes the schedule exactly; bad arguments refused."""

from __future__ import annotations

import types
from collections.abc import Callable

import pytest
import torch
from torch.optim.lr_scheduler import ExponentialLR, StepLR

from tracktrain.engine import Engine, Events
from tracktrain.handlers import param_scheduler as ours

ignite_ps = pytest.importorskip("ignite.handlers.param_scheduler")
import ignite.engine as ignite_engine  # noqa: E402

OURS = types.SimpleNamespace(Engine=Engine, Events=Events, ps=ours)
IGNITE = types.SimpleNamespace(Engine=ignite_engine.Engine, Events=ignite_engine.Events, ps=ignite_ps)


def flat(value) -> list[float]:
    """Every number in nested lists and tuples, in order (pytest.approx compares flat sequences)."""
    if isinstance(value, (list, tuple)):
        return [number for item in value for number in flat(item)]
    return [float(value)]


def make_optimizer() -> torch.optim.SGD:
    w1, w2 = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(3))
    return torch.optim.SGD([{"params": [w1], "lr": 0.1}, {"params": [w2], "lr": 0.2}], lr=0.1, momentum=0.9)


# each: (lib, optimizer) -> the scheduler to attach
SCENARIOS: dict[str, Callable] = {
    "linear-cyclical": lambda lib, opt: lib.ps.LinearCyclicalScheduler(opt, "lr", 0.0, 1.0, cycle_size=6),
    "linear-monotonic-warmup": lambda lib, opt: lib.ps.LinearCyclicalScheduler(
        opt, "lr", 1.0, 0.0, cycle_size=5, monotonic=True, warmup_duration=3, cycle_mult=2, end_value_mult=0.5
    ),
    "cosine-mults": lambda lib, opt: lib.ps.CosineAnnealingScheduler(
        opt, "momentum", 0.9, 0.5, cycle_size=4, cycle_mult=1.5, start_value_mult=0.8, param_group_index=1
    ),
    "piecewise": lambda lib, opt: lib.ps.PiecewiseLinear(opt, "lr", [(2, 0.5), (5, 1.0), (5, 0.2), (9, 0.0)]),
    "concat": lambda lib, opt: lib.ps.ConcatScheduler(
        [
            lib.ps.LinearCyclicalScheduler(opt, "lr", 0.1, 0.5, cycle_size=4),
            lib.ps.CosineAnnealingScheduler(opt, "lr", 0.5, 0.01, cycle_size=6),
        ],
        durations=[5],
    ),
    "group": lambda lib, opt: lib.ps.ParamGroupScheduler(
        [
            lib.ps.PiecewiseLinear(opt, "lr", [(0, 0.0), (8, 1.0)], param_group_index=0),
            lib.ps.CosineAnnealingScheduler(opt, "lr", 0.2, 0.0, cycle_size=5, param_group_index=1),
        ],
        names=["first", "second"],
    ),
    "warmup-torch": lambda lib, opt: lib.ps.create_lr_scheduler_with_warmup(
        StepLR(opt, step_size=3, gamma=0.5), warmup_start_value=0.0, warmup_duration=4
    ),
    "warmup-torch-end-value": lambda lib, opt: lib.ps.create_lr_scheduler_with_warmup(
        ExponentialLR(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.3), gamma=0.9),
        warmup_start_value=0.01,
        warmup_end_value=0.3,
        warmup_duration=3,
    ),
    "warmup-param-scheduler": lambda lib, opt: lib.ps.create_lr_scheduler_with_warmup(
        lib.ps.CosineAnnealingScheduler(opt, "lr", 0.2, 0.01, cycle_size=6),
        warmup_start_value=0.0,
        warmup_end_value=0.2,
        warmup_duration=4,
    ),
    "lr-scheduler": lambda lib, opt: lib.ps.LRScheduler(StepLR(opt, step_size=2, gamma=0.3)),
}
ITERATIONS = 16


def scheduled(lib, name: str):
    """The scenario's scheduler and the one optimizer it schedules."""
    opt = make_optimizer()
    scheduler = SCENARIOS[name](lib, opt)
    opt = getattr(scheduler, "optimizer", opt)
    return scheduler, opt[0] if isinstance(opt, list) else opt


def recording_step(opt: torch.optim.Optimizer, seen: list):
    """A process function that records the values it trains with (lr and momentum of each group), then steps."""

    def step(engine, batch):
        seen.append([(g["lr"], g.get("momentum", 0.0)) for g in opt.param_groups])
        opt.zero_grad()
        sum(p.sum() for g in opt.param_groups for p in g["params"]).backward()
        opt.step()

    return step


def run(lib, name: str, iterations: int = ITERATIONS, event: str = "ITERATION_STARTED"):
    """The values each iteration trained with and the scheduler's history."""
    scheduler, opt = scheduled(lib, name)
    seen: list = []
    engine = lib.Engine(recording_step(opt, seen))
    _set_history(scheduler)
    engine.add_event_handler(getattr(lib.Events, event), scheduler)
    engine.run(range(iterations // 4), max_epochs=4)
    return seen, engine.state.param_history


def _set_history(scheduler) -> None:
    scheduler.save_history = True


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_same_values_as_ignite_at_each_iteration(name):
    ignite_seen, ignite_history = run(IGNITE, name)
    seen, history = run(OURS, name)
    assert flat(seen) == pytest.approx(flat(ignite_seen))
    assert history.keys() == ignite_history.keys()
    for key in history:
        assert flat(history[key]) == pytest.approx(flat(ignite_history[key])), key
    assert len({tuple(row) for row in seen}) > 1


@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [
        ("LinearCyclicalScheduler", dict(param_name="lr", start_value=1.0, end_value=0.0, cycle_size=10)),
        ("CosineAnnealingScheduler", dict(param_name="lr", start_value=1.0, end_value=0.1, cycle_size=7, cycle_mult=2)),
        ("PiecewiseLinear", dict(param_name="lr", milestones_values=[(0, 0.0), (4, 1.0), (10, 0.1)])),
    ],
)
def test_simulate_values_as_ignite(cls, kwargs):
    expected = getattr(ignite_ps, cls).simulate_values(num_events=25, **kwargs)
    assert flat(getattr(ours, cls).simulate_values(num_events=25, **kwargs)) == pytest.approx(flat(expected))


def test_simulate_values_of_combinations_as_ignite_and_leave_the_schedulers_alone():
    for lib in (IGNITE, OURS):
        opt = make_optimizer()
        first = lib.ps.LinearCyclicalScheduler(opt, "lr", 0.1, 0.5, cycle_size=4)
        second = lib.ps.CosineAnnealingScheduler(opt, "lr", 0.5, 0.01, cycle_size=6)
        lib.concat = lib.ps.ConcatScheduler.simulate_values(30, schedulers=[first, second], durations=[7])
        assert first.event_index == 0 and opt.param_groups[0]["lr"] == 0.1
        lib.lr = lib.ps.LRScheduler.simulate_values(12, StepLR(opt, step_size=3, gamma=0.5))
        assert opt.param_groups[0]["lr"] == 0.1
        lib.plateau = lib.ps.ReduceLROnPlateauScheduler.simulate_values(
            8, metric_values=[1.0, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.8], init_lr=0.1, patience=1, factor=0.5
        )
        simulated = [None] * 20
        lib.ps.create_lr_scheduler_with_warmup(
            StepLR(opt, step_size=3, gamma=0.5), 0.0, 5, output_simulated_values=simulated
        )
        lib.warmup = simulated
    for key in ("concat", "lr", "plateau", "warmup"):
        assert flat(getattr(OURS, key)) == pytest.approx(flat(getattr(IGNITE, key))), key


@pytest.mark.parametrize(
    "name", ["linear-monotonic-warmup", "cosine-mults", "piecewise", "concat", "group", "warmup-torch"]
)
def test_a_checkpoint_resumes_the_schedule(name):
    full, _ = run(OURS, name)
    scheduler, opt = scheduled(OURS, name)
    seen: list = []
    engine = Engine(recording_step(opt, seen))
    engine.add_event_handler(Events.ITERATION_STARTED, scheduler)
    engine.run(range(7), max_epochs=1)
    saved = torch.load(_saved({"scheduler": scheduler.state_dict(), "optimizer": opt.state_dict()}), weights_only=True)

    resumed, opt = scheduled(OURS, name)
    opt.load_state_dict(saved["optimizer"])  # as a checkpoint does: the optimizer holds the rate reached
    resumed.load_state_dict(saved["scheduler"])
    engine = Engine(recording_step(opt, seen))
    engine.add_event_handler(Events.ITERATION_STARTED, resumed)
    engine.run(range(ITERATIONS - 7), max_epochs=1)
    assert flat(seen) == pytest.approx(flat(full))


def _saved(state) -> object:
    import io

    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return buffer


def test_state_dict_keys_as_ignite():
    for cls, kwargs in (
        ("LinearCyclicalScheduler", dict(param_name="lr", start_value=1.0, end_value=0.0, cycle_size=10)),
        ("PiecewiseLinear", dict(param_name="lr", milestones_values=[(0, 0.0), (4, 1.0)])),
    ):
        mine = getattr(ours, cls)(make_optimizer(), **kwargs).state_dict()
        theirs = getattr(ignite_ps, cls)(make_optimizer(), **kwargs).state_dict()
        assert list(mine) == list(theirs)
        assert mine == theirs


def test_reduce_lr_on_plateau_reduces_only_its_group():
    histories = []
    for lib in (IGNITE, OURS):
        opt = make_optimizer()
        trainer = lib.Engine(lambda e, b: None)
        evaluator = lib.Engine(lambda e, b: None)
        scheduler = lib.ps.ReduceLROnPlateauScheduler(
            opt,
            "loss",
            trainer=trainer,
            save_history=True,
            param_group_index=1,
            patience=0,
            factor=0.5,
            mode="min",
            min_lr=0.01,
        )
        losses = iter([1.0, 1.0, 1.0, 0.5, 0.5])
        evaluator.add_event_handler(lib.Events.COMPLETED, lambda e: e.state.metrics.update(loss=next(losses)))
        evaluator.add_event_handler(lib.Events.COMPLETED, scheduler)
        trainer.add_event_handler(lib.Events.EPOCH_COMPLETED, lambda: evaluator.run([0]))
        trainer.run([0], max_epochs=5)
        histories.append(([g["lr"] for g in opt.param_groups], trainer.state.param_history["lr"]))
    assert histories[1] == histories[0]
    assert histories[1][0][0] == 0.1  # the other group is left alone


def test_batch_size_scheduler():
    loader = torch.utils.data.DataLoader(list(range(100)), batch_size=2)
    engine = Engine(lambda e, b: len(b))
    sizes = []
    engine.add_event_handler(Events.ITERATION_COMPLETED, lambda e: sizes.append(e.state.output))
    ours.BatchSizeScheduler(loader, lambda i: 2 * (i + 1), save_history=True).attach(engine)
    engine.run(loader, max_epochs=3, epoch_length=2)
    assert sizes == [2, 2, 4, 4, 6, 6]
    assert engine.state.param_history["batch_size"] == [2, 4, 6]
    with pytest.raises(ValueError, match="should be a positive integer, but given 0 at event 0"):
        ours.BatchSizeScheduler(loader, lambda i: 0)(None)


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (
            lambda o: ours.LinearCyclicalScheduler(o, "lr", 0, 1, cycle_size=1),
            ValueError,
            "cycle_size should be positive and larger than 1, but given 1",
        ),
        (
            lambda o: ours.LinearCyclicalScheduler(o, "lr", 0, 1, 4, warmup_duration=2),
            ValueError,
            "Invalid combination when warmup_duration > 0 and monotonic=False",
        ),
        (
            lambda o: ours.CosineAnnealingScheduler(o, "lr", "0.1", 1, 4),
            TypeError,
            "start_value must be a number, got '0.1'",
        ),
        (
            lambda o: ours.PiecewiseLinear(o, "lr", [(3, 0.1), (2, 0.2)]),
            ValueError,
            "Milestones should be increasing integers, but given 2 is smaller than the previous milestone 3",
        ),
        (lambda o: ours.PiecewiseLinear(o, "lr", [[0, 0.1]]), ValueError, "should be a list of pairs"),
        (lambda o: ours.PiecewiseLinear(o, "lr", []), ValueError, "with at least one value"),
        (
            lambda o: ours.PiecewiseLinear("opt", "lr", [(0, 1)]),
            TypeError,
            "Argument optimizer should be torch.optim.Optimizer",
        ),
        (
            lambda o: ours.PiecewiseLinear(o, "lr", [(0, 1)], param_group_index=2),
            ValueError,
            "param_group_index=2 is not the index of one of the optimizer's 2 param groups",
        ),
        (
            lambda o: ours.ConcatScheduler([ours.PiecewiseLinear(o, "lr", [(0, 1)])], [1]),
            ValueError,
            "more than one parameter schedulers",
        ),
        (
            lambda o: ours.ConcatScheduler([ours.PiecewiseLinear(o, "lr", [(0, 1)])] * 2, [1, 2]),
            ValueError,
            "Incorrect number schedulers or duration values, given 2 and 2",
        ),
        (
            lambda o: ours.ConcatScheduler(
                [ours.PiecewiseLinear(o, "lr", [(0, 1)]), ours.PiecewiseLinear(make_optimizer(), "lr", [(0, 1)])], [1]
            ),
            ValueError,
            "same optimizer; ConcatScheduler got 2 different ones",
        ),
        (
            lambda o: ours.ConcatScheduler(
                [ours.PiecewiseLinear(o, "lr", [(0, 1)]), ours.PiecewiseLinear(o, "momentum", [(0, 1)])], [1]
            ),
            ValueError,
            "same param_name",
        ),
        (
            lambda o: ours.ParamGroupScheduler([ours.PiecewiseLinear(o, "lr", [(0, 1)])], names=["a", "b"]),
            ValueError,
            "1 should be equal 2",
        ),
        (
            lambda o: ours.create_lr_scheduler_with_warmup(StepLR(o, 1), 0.0, 1),
            ValueError,
            "warmup_duration should be at least 2 events, but given 1",
        ),
        (
            lambda o: ours.create_lr_scheduler_with_warmup("sched", 0.0, 3),
            TypeError,
            "Argument lr_scheduler should be a subclass",
        ),
        (
            lambda o: ours.ReduceLROnPlateauScheduler(o, "loss", param_group_index=0, min_lr=1),
            TypeError,
            "min_lr should be a float",
        ),
    ],
)
def test_bad_arguments_are_refused_with_ignites_words(build, error, match):
    with pytest.raises(error, match=match):
        build(make_optimizer())


def test_load_state_dict_refuses_what_is_not_a_state():
    scheduler = ours.PiecewiseLinear(make_optimizer(), "lr", [(0, 1.0), (3, 0.0)])
    with pytest.raises(TypeError, match="Argument state_dict should be a dictionary"):
        scheduler.load_state_dict([1])
    with pytest.raises(
        ValueError, match=r"Required state attribute\(s\) \['values', 'milestones', '_index'\] are absent"
    ):
        scheduler.load_state_dict(
            {"event_index": 1, "param_name": "lr", "save_history": False, "param_group_index": None}
        )
    group = ours.ParamGroupScheduler([scheduler], names=["a"])
    with pytest.raises(
        ValueError, match="Name of scheduler from input state dict does not correspond to required one, b vs a"
    ):
        group.load_state_dict({"schedulers": [("b", scheduler.state_dict())]})
    with pytest.raises(ValueError, match="metrics are \\[\\]"):
        ours.ReduceLROnPlateauScheduler(make_optimizer(), "loss")(Engine(lambda e, b: None))
