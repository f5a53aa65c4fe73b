"""The sanity check: before a fit's first training batch, a few validation batches run through `eval_step`, so that
a bug in the validation code fails in seconds instead of after a whole training epoch (`Trainer(num_sanity_val_steps=
2)`, Lightning's default and meaning).

The pass leaves nothing behind: its values reach no logger and are not in `callback_metrics`; the random number
generators are as before it (the data order and dropout of the run do not depend on whether it ran, so a resumed
run trains as the uninterrupted one did); no checkpoint or early-stopping decision is taken on it (those are taken
only while `trainer.fitting`). The validation hooks run, with `trainer.sanity_checking` True, between the
`on_sanity_check_start` and `on_sanity_check_end` hooks; a callback of one's own that acts on validation values
checks `trainer.sanity_checking`, as in Lightning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracktrain.rng import get_rng_states, set_rng_states
from tracktrain.trainer.hooks import TrainerEvents

if TYPE_CHECKING:
    from tracktrain.engine.engine import Engine
    from tracktrain.trainer.evaluation import EvaluationStages
    from tracktrain.trainer.fit_context import FitContext
    from tracktrain.trainer.metrics_hub import MetricsHub

__all__ = ["run_sanity_check", "sanity_steps"]


def sanity_steps(value: Any, fast_dev_run: int) -> int:
    """`num_sanity_val_steps` checked: batches of the sanity check, 0 (off) or -1 (the whole validation loader);
    always 0 under `fast_dev_run`, whose own validation batches come soon enough."""
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise ValueError(
            f"Trainer(num_sanity_val_steps={value!r}) must be a number of validation batches: 0 turns the sanity "
            "check off, -1 runs all of them, the default 2 runs two."
        )
    return 0 if fast_dev_run else value


def run_sanity_check(
    context: FitContext,
    val_loader: Any,
    steps: int,
    train_engine: Engine,
    metrics: MetricsHub,
    evaluation: EvaluationStages,
) -> None:
    """Run `steps` batches (`num_sanity_val_steps`) of `val_loader` through `evaluation`'s validation, its values
    discarded by `metrics`, between the sanity-check events of `train_engine`; leaving nothing behind."""
    if val_loader is None or steps == 0:
        return
    rng_states = get_rng_states()  # a loader's iterator draws its base seed from torch's generator
    context.sanity_checking = True
    try:
        train_engine.fire_event(TrainerEvents.SANITY_CHECK_STARTED)
        with metrics.discarding():
            evaluation.run("validate", val_loader, max_batches=None if steps == -1 else steps)
        train_engine.fire_event(TrainerEvents.SANITY_CHECK_COMPLETED)
    finally:
        context.sanity_checking = False
        set_rng_states(rng_states)
