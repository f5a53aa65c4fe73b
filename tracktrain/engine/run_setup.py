"""How `Engine.run()`'s arguments are checked and turned into the state a run starts or resumes from.

Functions of the `State` and the arguments alone; the engine's own bookkeeping (its paused run, its data
iterator) stays with the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tracktrain.checks.numeric import is_integral
from tracktrain.engine.state import State

__all__ = [
    "check_and_set_limit",
    "check_run_arguments",
    "data_length",
    "is_done",
    "positive_int",
    "resume_run_state",
    "start_new_run_state",
]


def positive_int(name: str, value: Any) -> int:
    if not (is_integral(value) and not isinstance(value, bool) and value > 0):
        raise ValueError(f"Argument {name} is invalid. Please, set a correct {name} positive value (got {value!r}).")
    return int(value)


def is_done(state: State) -> bool:
    """Whether the run described by `state` has reached its `max_iters` or `max_epochs`."""
    if state.max_iters is not None and state.iteration >= state.max_iters:
        return True
    if state.max_epochs is None:
        return False
    if state.epoch_length is not None and state.iteration >= state.epoch_length * state.max_epochs:
        return True
    return state.epoch >= state.max_epochs


def data_length(data: Iterable) -> int | None:
    """`len(data)`, or None for data without a length."""
    try:
        if hasattr(data, "__len__"):
            return len(data)  # type: ignore[arg-type]
    except TypeError:  # e.g. a DataLoader over an IterableDataset without __len__
        pass
    return None


def check_and_set_limit(state: State, name: str, value: int | None, progress_name: str, progress_value: int) -> None:
    """Validate a new limit `name` (`max_epochs`/`max_iters`) against the progress made and set it (Ignite's)."""
    if value is None:
        return
    if value < 1:
        raise ValueError(f"Argument {name} is invalid. Please, set a correct {name} positive value (got {value}).")
    if value < progress_value:
        raise ValueError(
            f"Argument {name} should be greater than or equal to the start {progress_name} defined in the state: "
            f"{value} vs {progress_value}. Please, set engine.state.{name} = None before calling engine.run() in "
            "order to restart the training from the beginning."
        )
    setattr(state, name, value)


def check_run_arguments(
    state: State,
    data: Iterable | None,
    max_epochs: int | None,
    epoch_length: int | None,
    max_iters: int | None,
    seed: int | None,
) -> None:
    """The checks `run()` makes before it touches anything, in Ignite's order, each message starting with
    Ignite's words."""
    if data is not None and not isinstance(data, Iterable):
        raise TypeError(f"Argument data should be iterable: got {type(data).__name__}; pass a DataLoader, a list, ...")
    if max_epochs is not None and max_iters is not None:
        raise ValueError(
            "Arguments max_iters and max_epochs are mutually exclusive. Please provide only max_epochs or "
            f"max_iters. (Got max_epochs={max_epochs} and max_iters={max_iters}.)"
        )
    # Ignite's rule: a state with one kind of limit keeps it, finished or not, until it is reset
    if max_iters is not None and state.max_epochs is not None:
        raise ValueError(
            "To switch from max_epochs to max_iters mode during resume, you must first reset by setting "
            f"'engine.state.max_epochs = None' before calling run(). (The state has max_epochs={state.max_epochs} "
            f"at epoch {state.epoch}; max_iters={max_iters} was given.)"
        )
    if max_epochs is not None and state.max_iters is not None:
        raise ValueError(
            "To switch from max_iters to max_epochs mode during resume, you must first reset by setting "
            f"'engine.state.max_iters = None' before calling run(). (The state has max_iters={state.max_iters} "
            f"at iteration {state.iteration}; max_epochs={max_epochs} was given.)"
        )
    if max_epochs is not None:
        positive_int("max_epochs", max_epochs)
    if max_iters is not None:
        positive_int("max_iters", max_iters)
    if epoch_length is not None and not (
        is_integral(epoch_length) and not isinstance(epoch_length, bool) and epoch_length > 0
    ):
        raise ValueError(
            f"Input data has zero size. Please provide non-empty data (epoch_length={epoch_length!r}; it must "
            "be a positive integer)."
        )
    if seed is not None and not is_integral(seed):
        raise TypeError(f"Argument seed must be an integer, got {seed!r}.")


def start_new_run_state(
    state: State,
    data: Iterable | None,
    max_epochs: int | None,
    epoch_length: int | None,
    max_iters: int | None,
    seed: int | None,
    length_of: Callable[[Iterable], int | None] = data_length,
) -> None:
    """Counters to 0 and the limits of a new run: `max_epochs` defaults to 1, `epoch_length` to `len(data)`
    (`length_of(data)`; for data without a length, the one the last run found)."""
    if data is None and epoch_length is None and state.epoch_length is None:
        raise ValueError("epoch_length should be provided if data is None.")
    if epoch_length is None:
        if data is not None:
            epoch_length = length_of(data)
        if epoch_length is None:  # data without a length: keep the one the last run found
            epoch_length = state.epoch_length
        if epoch_length is not None and epoch_length < 1:
            raise ValueError("Input data has zero size. Please provide non-empty data.")
    if max_iters is None and max_epochs is None:
        max_epochs = 1
    state.iteration = 0
    state.epoch = 0
    state.max_epochs = max_epochs
    state.max_iters = max_iters
    state.epoch_length = epoch_length
    state.seed = seed


def resume_run_state(
    state: State,
    data: Iterable | None,
    epoch_length: int | None,
    seed: int | None,
    length_of: Callable[[Iterable], int | None] = data_length,
) -> None:
    """Check the arguments of a resumed run against `state`: the epoch length cannot change, and a state
    without one takes the data's; a given `seed` replaces the state's."""
    if state.epoch_length is not None:
        if epoch_length is not None and epoch_length != state.epoch_length:
            raise ValueError(
                "Argument epoch_length should be same as in the state, "
                f"but given {epoch_length} vs {state.epoch_length}. Resuming cannot change the epoch "
                "length; start a new run (engine.state.max_epochs = None) to use another one."
            )
    else:
        if epoch_length is None and data is not None:
            epoch_length = length_of(data)
        if epoch_length is not None:
            if epoch_length < 1:
                raise ValueError("Input data has zero size. Please provide non-empty data.")
            state.epoch_length = epoch_length
    if state.epoch_length is None and data is None:
        raise ValueError("epoch_length should be provided if data is None.")
    if seed is not None:
        state.seed = seed
