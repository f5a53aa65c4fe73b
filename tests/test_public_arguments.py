"""A property-based fuzz of the public entry points: any value of a wrong type or range, given to one argument,
either works or fails at the call with a TypeError or ValueError whose message names the argument (what is wrong,
the value, the fix), never with an error from deep inside (AttributeError, KeyError, a bare `unhashable type`...).

An iterable given as data is taken as it is: what its batches hold is the module's business, so loaders are
fuzzed with non-iterables, strings and mappings only."""

from __future__ import annotations

import inspect
import warnings

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.trainer._tasks import Classifier, make_loader  # noqa: E402
from tracktrain import Engine, Trainer  # noqa: E402
from tracktrain.callbacks import EarlyStopping, ModelCheckpoint  # noqa: E402

WRONG = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.tuples(st.integers()),
    st.builds(object),
)
NOT_DATA = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.builds(object),
)
FUZZ = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def check_call(call, argument: str, value) -> None:
    """`call()` works, or raises TypeError/ValueError naming `argument`; anything else fails the test."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            call()
    except (TypeError, ValueError) as error:
        assert argument in str(error), f"{argument}={value!r}: {type(error).__name__}: {error}"
    except FileNotFoundError as error:  # a checkpoint path that names nothing: said with the path
        assert argument == "ckpt_path" and repr(str(value)) in str(error), f"{argument}={value!r}: {error}"


def parameters(function, leave_out=()) -> list[str]:
    return [
        name
        for name, p in inspect.signature(function).parameters.items()
        if name != "self" and name not in leave_out and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    ]


@pytest.mark.parametrize("argument", parameters(Trainer.__init__))
@FUZZ
@given(value=WRONG)
def test_trainer_arguments(tmp_path, argument, value):
    options = {"default_root_dir": tmp_path, argument: value}
    check_call(lambda: Trainer(**options), argument, value)


@pytest.mark.parametrize("argument", parameters(ModelCheckpoint.__init__))
@FUZZ
@given(value=WRONG)
def test_model_checkpoint_arguments(argument, value):
    check_call(lambda: ModelCheckpoint(**{argument: value}), argument, value)


@pytest.mark.parametrize("argument", parameters(EarlyStopping.__init__))
@FUZZ
@given(value=WRONG)
def test_early_stopping_arguments(argument, value):
    check_call(lambda: EarlyStopping(**{"monitor": "val_loss", argument: value}), argument, value)


@pytest.mark.parametrize("argument", ["model", "train_dataloaders", "val_dataloaders", "ckpt_path"])
@FUZZ
@given(value=WRONG, data_value=NOT_DATA)
def test_fit_arguments(tmp_path, argument, value, data_value):
    given_value = data_value if argument.endswith("dataloaders") else value
    trainer = Trainer(
        default_root_dir=tmp_path, max_epochs=1, enable_progress_bar=False, loggers=False, enable_checkpointing=False
    )
    options = {"model": Classifier(), "train_dataloaders": make_loader(n=8), argument: given_value}
    check_call(lambda: trainer.fit(**options), argument, given_value)


@pytest.mark.parametrize("argument", ["data", "max_epochs", "epoch_length", "max_iters"])
@FUZZ
@given(value=WRONG, data_value=NOT_DATA)
def test_engine_run_arguments(argument, value, data_value):
    given_value = data_value if argument == "data" else value
    options = {"data": [1, 2, 3], "max_epochs": 1, argument: given_value}
    if argument == "max_iters":
        options.pop("max_epochs")
    check_call(lambda: Engine(lambda engine, batch: None).run(**options), argument, given_value)
