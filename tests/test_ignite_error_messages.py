"""Differential test: the errors of the handlers, metrics and supervised helpers against Ignite's.

Each case calls the same public API with the same bad input on both libraries. The two must raise the same
exception type, and tracktrain's message must start with Ignite's words (users and their tests match on them);
ours may go on with the value and the fix. The Engine's own errors are compared by the traces of
`tests/engine/test_ignite_parity.py`; `Checkpoint.load_objects`'s in `tests/handlers/test_checkpoint.py`.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

pytest.importorskip("ignite")

import ignite.engine as ignite_engine  # noqa: E402
import ignite.handlers as ignite_handlers  # noqa: E402
import ignite.metrics as ignite_metrics  # noqa: E402

import tracktrain.engine as tracktrain_engine  # noqa: E402
import tracktrain.handlers as tracktrain_handlers  # noqa: E402
import tracktrain.metrics as tracktrain_metrics  # noqa: E402
from tests.engine._trace import Raised  # noqa: E402

TRACKTRAIN = types.SimpleNamespace(
    name="tracktrain", engine=tracktrain_engine, handlers=tracktrain_handlers, metrics=tracktrain_metrics
)
IGNITE = types.SimpleNamespace(name="ignite", engine=ignite_engine, handlers=ignite_handlers, metrics=ignite_metrics)


def _model() -> nn.Module:
    return nn.Linear(2, 2)


def _saver(lib: Any, folder: Path) -> Any:
    return lib.handlers.DiskSaver(str(folder), require_empty=False)


def _checkpoint(lib: Any, folder: Path, **kwargs: Any) -> Any:
    return lib.handlers.Checkpoint({"model": _model()}, _saver(lib, folder), **kwargs)


def _nonempty_folder(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model_1.pt").write_bytes(b"x")
    return folder


def _engine(lib: Any) -> Any:
    return lib.engine.Engine(lambda engine, batch: None)


def _compute_before_update(name: str, *args: Any) -> Callable[[Any, Path], Any]:
    return lambda lib, folder: getattr(lib.metrics, name)(*args).compute()


def _trainer(lib: Any, **kwargs: Any) -> Any:
    model = _model()
    return lib.engine.create_supervised_trainer(model, torch.optim.SGD(model.parameters(), 0.1), nn.MSELoss(), **kwargs)


CASES: dict[str, Callable[[Any, Path], Any]] = {
    # Checkpoint
    "checkpoint_to_save_not_a_mapping": lambda lib, folder: lib.handlers.Checkpoint([_model()], _saver(lib, folder)),
    "checkpoint_object_without_state_dict": lambda lib, folder: lib.handlers.Checkpoint(
        {"model": 3}, _saver(lib, folder)
    ),
    "checkpoint_global_step_transform_not_callable": lambda lib, folder: _checkpoint(
        lib, folder, global_step_transform=3
    ),
    "checkpoint_save_handler_of_a_wrong_type": lambda lib, folder: lib.handlers.Checkpoint({"model": _model()}, 3),
    "checkpoint_reserved_key_with_include_self": lambda lib, folder: lib.handlers.Checkpoint(
        {"checkpointer": _model()}, _saver(lib, folder), include_self=True
    ),
    # DiskSaver / ModelCheckpoint
    "disk_saver_missing_folder": lambda lib, folder: lib.handlers.DiskSaver(str(folder / "missing"), create_dir=False),
    "disk_saver_folder_not_empty": lambda lib, folder: lib.handlers.DiskSaver(str(_nonempty_folder(folder / "d"))),
    "model_checkpoint_folder_not_empty": lambda lib, folder: lib.handlers.ModelCheckpoint(
        str(_nonempty_folder(folder / "m")), "model"
    ),
    # EarlyStopping
    "early_stopping_patience_zero": lambda lib, folder: lib.handlers.EarlyStopping(0, lambda e: 0.0, _engine(lib)),
    "early_stopping_score_function_not_callable": lambda lib, folder: lib.handlers.EarlyStopping(2, 3, _engine(lib)),
    "early_stopping_negative_threshold": lambda lib, folder: lib.handlers.EarlyStopping(
        2, lambda e: 0.0, _engine(lib), threshold=-1.0
    ),
    "early_stopping_trainer_not_an_engine": lambda lib, folder: lib.handlers.EarlyStopping(2, lambda e: 0.0, 3),
    # LRScheduler
    "lr_scheduler_not_a_scheduler": lambda lib, folder: lib.handlers.LRScheduler(3),
    # metrics computed before any update
    "accuracy_before_update": _compute_before_update("Accuracy"),
    "loss_before_update": _compute_before_update("Loss", nn.MSELoss()),
    "mean_squared_error_before_update": _compute_before_update("MeanSquaredError"),
    "mean_absolute_error_before_update": _compute_before_update("MeanAbsoluteError"),
    "average_before_update": _compute_before_update("Average"),
    "top_k_before_update": _compute_before_update("TopKCategoricalAccuracy"),
    # metric arguments and inputs
    "accuracy_shapes_that_do_not_match": lambda lib, folder: lib.metrics.Accuracy().update(
        (torch.zeros(4, 3, 5), torch.zeros(4, 2).long())
    ),
    "running_average_without_src_or_output_transform": lambda lib, folder: lib.metrics.RunningAverage(),
    "running_average_alpha_out_of_range": lambda lib, folder: lib.metrics.RunningAverage(
        output_transform=lambda x: x, alpha=2.0
    ),
    "metric_attach_with_an_unknown_usage": lambda lib, folder: lib.metrics.Accuracy().attach(
        _engine(lib), "acc", usage="sometimes"
    ),
    # supervised helpers
    "trainer_gradient_accumulation_steps_zero": lambda lib, folder: _trainer(lib, gradient_accumulation_steps=0),
    "trainer_scaler_without_amp": lambda lib, folder: _trainer(lib, scaler=True),
}


# Bad input that tracktrain refuses earlier or more strictly than Ignite, on purpose (README, "differences from
# Ignite"): (the case, the error Ignite raises or None when it accepts the input, a word of our message).
DELIBERATE: dict[str, tuple[Callable[[Any, Path], Any], type[Exception] | None, str]] = {
    # Ignite raises KeyError at the first save, hours into a run; we refuse the pattern when it is given
    "checkpoint_filename_pattern_with_an_unknown_field": (
        lambda lib, folder: _checkpoint(lib, folder, filename_pattern="{nope}.pt")(_run_engine(lib)),
        KeyError,
        "unknown fields ['nope']",
    ),
    # Ignite trains without autocast when amp_mode is misspelled; we say so instead
    "trainer_unknown_amp_mode": (lambda lib, folder: _trainer(lib, amp_mode="fast"), None, "amp_mode"),
}


def _run_engine(lib: Any) -> Any:
    engine = _engine(lib)
    engine.run([0], max_epochs=1)
    return engine


def _raised(lib: Any, case: Callable[[Any, Path], Any], folder: Path) -> Raised | None:
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    try:
        case(lib, folder)
    except Exception as error:
        return Raised.of(error, lib)
    return None


@pytest.mark.parametrize("case", list(CASES))
def test_the_error_is_ignites_type_and_starts_with_its_words(case, tmp_path):
    # the same folder for both: paths are part of some messages
    theirs = _raised(IGNITE, CASES[case], tmp_path)
    ours = _raised(TRACKTRAIN, CASES[case], tmp_path)
    assert theirs is not None, "the case must be an error in Ignite"
    assert ours == theirs


@pytest.mark.parametrize("case", list(DELIBERATE))
def test_input_we_refuse_on_purpose_is_a_value_error_that_says_why(case, tmp_path):
    run, ignite_error, word = DELIBERATE[case]
    theirs = _raised(IGNITE, run, tmp_path)
    ours = _raised(TRACKTRAIN, run, tmp_path)
    assert (theirs and theirs.type_name) == (ignite_error and ignite_error.__name__)
    assert ours is not None and ours.type_name == "ValueError" and word in ours.message
