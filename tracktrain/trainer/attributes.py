"""What may be set on a `Trainer`: its own attributes, declared here in one place. Setting any other name is an
`AttributeError` that names what to use, because the Trainer would never read it: `trainer.max_epochz = 3` or a
Lightning attribute we do not take must not be silently ignored (issue 35).

Properties with a setter (`should_stop`) are settable too; a subclass of `Trainer` declares its own additions in
`Trainer.own_attributes`.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable
from typing import ParamSpec

from tracktrain.trainer.lightning_names import TRAINER_ARGUMENTS_NOT_OFFERED

P = ParamSpec("P")

__all__ = ["TRAINER_ATTRIBUTES", "refuse_attribute", "refusing_unknown_arguments"]

# Every attribute a Trainer holds (set in `Trainer.__init__`, and by the Trainer's own parts during a run).
TRAINER_ATTRIBUTES = frozenset(
    {
        # settings, from the constructor's arguments (read when each fit/validate/test/predict starts)
        "accumulate_grad_batches", "activation_checkpointing", "autocast_dtype", "param_dtype", "compile", "default_root_dir",
        "deterministic", "benchmark", "fast_dev_run", "gradient_clip_algorithm", "gradient_clip_val", "limits",
        "log_every_n_steps", "max_epochs", "max_steps", "min_epochs", "min_steps", "detect_anomaly", "reload_dataloaders_every_n_epochs", "max_time", "training_time", "nonfinite", "num_sanity_val_steps", "overfit_batches",
        "precision", "preemption_timeout", "resume", "resume_with_changes", "seed", "strategy", "strategy_name",
        "val_check_interval", "val_every_n_epochs", "loggers",
        # the Trainer's parts (`_callbacks`: the one list the `callbacks` property shows and sets)
        "_callbacks", "_last_fit_stopped", "checkpoints", "engines", "eval_engine", "evaluation", "fit_step", "metrics", "nonfinite_watch",
        "predict_engine", "preemption", "run_order", "session", "state", "test_engine", "train_engine", "logger_bridge",
        # what a fit creates (module, optimizers, the resumed checkpoint, ...): read through the Trainer's read-only
        # properties of the same names
        "context",
    }
)  # fmt: skip

# Lightning's Trainer attributes and arguments that are not ours under that name: what to use instead.
_LIGHTNING_NAMES = {
    "check_val_every_n_epoch": "Trainer(check_val_every_n_epoch=...) (or ours, val_every_n_epochs) or trainer.val_every_n_epochs",
    "limit_train_batches": 'Trainer(limit_train_batches=...) or trainer.limits["fit"]',
    "limit_val_batches": 'Trainer(limit_val_batches=...) or trainer.limits["validate"]',
    "limit_test_batches": 'Trainer(limit_test_batches=...) or trainer.limits["test"]',
    "limit_predict_batches": 'Trainer(limit_predict_batches=...) or trainer.limits["predict"]',
    "devices": "torchrun --nproc_per_node (or tracktrain.distributed.spawn): processes come from the launcher (Trainer(devices=...) checks their number)",
    "num_nodes": "torchrun --nnodes: processes come from the launcher",
}


def refusing_unknown_arguments(init: Callable[P, None]) -> Callable[P, None]:
    """`Trainer.__init__`, raising a TypeError that says what to use for an argument it does not take: Lightning's
    that are not ours (`min_epochs`, `num_nodes`, ...) with their replacement, a misspelling with the close names.
    (Python's own error names the argument but not the fix.) The signature stays `init`'s (`__wrapped__`)."""
    parameters = inspect.signature(init).parameters

    @functools.wraps(init)
    def checked(*args: P.args, **kwargs: P.kwargs) -> None:
        for name in kwargs:
            if name in parameters:
                continue
            what = f"Trainer() got an unexpected keyword argument {name!r}"
            if name in TRAINER_ARGUMENTS_NOT_OFFERED:
                raise TypeError(
                    f"{what}: Lightning's, which tracktrain does not take. Use {TRAINER_ARGUMENTS_NOT_OFFERED[name]}."
                )
            close = difflib.get_close_matches(name, [key for key in parameters if key != "self"], n=3)
            hint = f" Did you mean {' or '.join(close)}?" if close else " See help(Trainer) for its arguments."
            raise TypeError(what + "." + hint)
        init(*args, **kwargs)

    return checked


def refuse_attribute(trainer_class: type, name: str) -> None:
    """Raise unless `name` is a settable property of `trainer_class` (a name not in `TRAINER_ATTRIBUTES` or the
    class's `own_attributes`): the error says what the value would have been for, and what to use."""
    found = inspect.getattr_static(trainer_class, name, None)
    if isinstance(found, property):
        if found.fset is not None:
            return
        raise AttributeError(f"Trainer.{name} is read-only: the Trainer keeps it up to date itself.")
    what = f"Trainer has no setting {name!r}: the Trainer would never read it, so setting it is refused."
    init = inspect.signature(trainer_class).parameters
    if name in _LIGHTNING_NAMES:
        raise AttributeError(f"{what} Use {_LIGHTNING_NAMES[name]}.")
    if name in init:
        raise AttributeError(f"{what} Pass it when building the Trainer: Trainer({name}=...).")
    known = sorted(TRAINER_ATTRIBUTES | set(init) | _settable_properties(trainer_class))
    close = difflib.get_close_matches(name, known, n=3)
    hint = f" Did you mean {' or '.join(close)}?" if close else " Settings are the arguments of Trainer(...)."
    raise AttributeError(what + hint)


def _settable_properties(trainer_class: type) -> set[str]:
    return {
        name
        for name, value in inspect.getmembers_static(trainer_class)
        if isinstance(value, property) and value.fset is not None
    }
