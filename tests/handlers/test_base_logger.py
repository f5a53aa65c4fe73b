"""Ignite's logger API without a tracker (`tracktrain.handlers.base_logger`): what each handler picks and how it is
named, as Ignite 0.5.5's handlers do it, and the arguments they refuse."""

from __future__ import annotations

import pytest
import torch

from tracktrain.engine import Engine, Events
from tracktrain.handlers.base_logger import (
    BaseLogger,
    GradsHistHandler,
    GradsScalarHandler,
    OptimizerParamsHandler,
    OutputHandler,
    WeightsScalarHandler,
)


class Recorder(BaseLogger):
    """A logger that keeps what it is given (its values read back to floats, as the trackers' faces do)."""

    def __init__(self, joiner: str = "/") -> None:
        self.rows: list[tuple[int, dict]] = []
        self.joiner = joiner

    def key(self, parts):
        return self.joiner.join(parts)

    def write_scalars(self, values, step):
        self.rows.append((step, {name: float(value) for name, value in values.items()}))


def engine_with_state() -> Engine:
    engine = Engine(lambda e, b: torch.tensor(float(b)))
    engine.state.metrics = {"acc": 0.5, "vec": torch.tensor([1.0, 2.0]), "d": {"x": torch.tensor(3.0)}}
    engine.state.output = torch.tensor(4.0)
    engine.state.iteration, engine.state.epoch = 7, 2
    engine.state.alpha = 0.3
    return engine


def test_output_handler_names_and_values_as_ignites():
    base_logger = pytest.importorskip("ignite.handlers.base_logger")

    class IgniteOutputHandler(base_logger.BaseOutputHandler):
        def __call__(self, engine, logger, event_name):
            pass

    engine = engine_with_state()
    handler = OutputHandler(
        "tag", metric_names="all", output_transform=lambda o: {"loss": o}, state_attributes=["alpha"]
    )
    for key_tuple, joiner in ((False, "/"), (True, " ")):
        logger = Recorder(joiner)
        handler(engine, logger, Events.ITERATION_COMPLETED)
        theirs = IgniteOutputHandler(
            "tag", metric_names="all", output_transform=lambda o: {"loss": o}, state_attributes=["alpha"]
        )._setup_output_metrics_state_attrs(engine, key_tuple=key_tuple)
        expected = {(" ".join(k) if key_tuple else k): float(v) for k, v in theirs.items()}
        assert logger.rows == [(7, pytest.approx(expected))]
        assert logger.rows[0][1].keys() == expected.keys()


def test_output_handler_picks_metrics_by_name_and_warns_of_missing_ones():
    engine = engine_with_state()
    logger = Recorder()
    with pytest.warns(UserWarning, match="Provided metric name 'missing' is missing in engine's state metrics"):
        OutputHandler("val", metric_names=["acc", "missing"], global_step_transform=lambda e, ev: 99)(
            engine, logger, Events.EPOCH_COMPLETED
        )
    assert logger.rows == [(99, {"val/acc": 0.5})]
    with pytest.warns(UserWarning, match="can not log metrics value type <class 'object'>"):
        OutputHandler("val", output_transform=lambda o: {"o": object()})(engine, logger, Events.EPOCH_COMPLETED)


def test_optimizer_and_weight_handlers():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD([{"params": [model.weight]}, {"params": [model.bias], "lr": 0.5}], lr=0.1)
    model(torch.ones(1, 2)).sum().backward()
    engine = engine_with_state()
    logger = Recorder()
    OptimizerParamsHandler(optimizer, tag="opt")(engine, logger, Events.ITERATION_STARTED)
    WeightsScalarHandler(model, whitelist=["bias"])(engine, logger, Events.ITERATION_COMPLETED)
    GradsScalarHandler(model, reduction=torch.sum, tag="g")(engine, logger, Events.EPOCH_COMPLETED)
    assert logger.rows[0] == (7, {"opt/lr/group_0": 0.1, "opt/lr/group_1": 0.5})
    assert logger.rows[1] == (7, {"weights_norm/bias": pytest.approx(float(model.bias.detach().norm()))})
    assert logger.rows[2] == (2, {"g/grads_sum/weight": 2.0, "g/grads_sum/bias": 1.0})


def test_attach_checks_the_event_and_calls_the_handler_with_the_logger():
    engine = Engine(lambda e, b: torch.tensor(1.0))
    logger = Recorder()
    handler = OutputHandler("t", output_transform=lambda o: o)
    handle = logger.attach(engine, handler, Events.ITERATION_COMPLETED | Events.EPOCH_COMPLETED)
    engine.run([0, 0], max_epochs=1)
    assert [step for step, _ in logger.rows] == [1, 2, 1] and logger.rows[0][1] == {"t/output": 1.0}
    handle.remove()
    with pytest.raises(
        RuntimeError, match="Unknown event name 'Events.TERMINATE'|Unknown event name '<event=TERMINATE>'"
    ):
        logger.attach(engine, handler, Events.TERMINATE)


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda: OutputHandler("t"), ValueError, "Either metric_names, output_transform or state_attributes"),
        (
            lambda: OutputHandler("t", metric_names="acc"),
            TypeError,
            "metric_names should be either a list or equal 'all'",
        ),
        (lambda: OutputHandler("t", output_transform=3), TypeError, "output_transform should be a function"),
        (
            lambda: OutputHandler("t", metric_names="all", global_step_transform=1),
            TypeError,
            "global_step_transform should be a function",
        ),
        (lambda: OptimizerParamsHandler("sgd"), TypeError, "Argument optimizer should be torch.optim.Optimizer"),
        (lambda: WeightsScalarHandler("model"), TypeError, "Argument model should be of type torch.nn.Module"),
        (lambda: WeightsScalarHandler(torch.nn.Linear(1, 1), reduction=lambda t: t), TypeError, "should be a scalar"),
    ],
)
def test_bad_arguments_are_refused(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_a_handler_refuses_what_is_not_a_tracker_logger_and_a_bad_step():
    engine = engine_with_state()
    with pytest.raises(TypeError, match="works only with a tracker's logger"):
        OutputHandler("t", metric_names="all")(engine, object(), Events.EPOCH_COMPLETED)
    with pytest.raises(TypeError, match="works only with TensorboardLogger"):
        GradsHistHandler(torch.nn.Linear(1, 1))(engine, Recorder(), Events.EPOCH_COMPLETED)
    with pytest.raises(TypeError, match="global_step must be int, got <class 'float'>"):
        OutputHandler("t", metric_names="all", global_step_transform=lambda e, ev: 1.5)(
            engine, Recorder(), Events.EPOCH_COMPLETED
        )
