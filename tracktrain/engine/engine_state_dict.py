"""What an Engine's `state_dict()` holds, and how `load_state_dict()` checks and restores it.

Functions of the `State` alone: the engine passes in its state and the keys it saves, and forgets its paused
run itself after a load.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from tracktrain.checks.numeric import is_integral
from tracktrain.engine.state import State

__all__ = ["engine_state_dict", "load_engine_state"]


def engine_state_dict(state: State, required_keys: tuple[str, ...], user_keys: Sequence[str]) -> OrderedDict:
    """`required_keys` (`epoch_length`, `iteration`), `max_epochs` or `max_iters`, and `user_keys` of `state`."""
    keys = required_keys
    keys += ("max_iters",) if state.max_iters is not None else ("max_epochs",)
    keys += tuple(user_keys)
    return OrderedDict((k, getattr(state, k)) for k in keys)


def load_engine_state(
    state: State,
    state_dict: Any,
    required_keys: tuple[str, ...],
    one_of_keys: tuple[tuple[str, ...], ...],
    user_keys: Sequence[str],
) -> None:
    """Check `state_dict` (see `Engine.load_state_dict`) and set the counters, limits and user keys of `state`.

    Needs `epoch_length`, one of `iteration`/`epoch`, one of `one_of_keys[0]` (`max_epochs`/`max_iters`), plus
    every key in `user_keys`.
    """
    # Checked in Ignite's order and starting with Ignite's words (users and their tests match on them).
    if not isinstance(state_dict, Mapping):
        raise TypeError(
            f"Argument state_dict should be a dictionary, but given {type(state_dict)}: pass what "
            "engine.state_dict() returned."
        )
    if "iteration" in state_dict and "epoch" in state_dict:
        raise ValueError(
            "State dictionary should contain only one of 'iteration' or 'epoch' keys. "
            f"Found both: iteration={state_dict['iteration']}, epoch={state_dict['epoch']}."
        )
    state_dict = dict(state_dict)
    if "iteration" in state_dict or "epoch" in state_dict:
        epoch_length = state_dict.get("epoch_length")
        if state_dict.get("epoch") == 0 or state_dict.get("iteration") == 0:
            state_dict["epoch"] = state_dict["iteration"] = 0
        elif "iteration" in state_dict and "epoch_length" in state_dict and epoch_length is None:
            # Data without a length (saved mid-run by DeterministicEngine): Ignite refuses this state,
            # we resume it by iteration, the epoch count unknown.
            state_dict["epoch"] = 0
        elif epoch_length is None or not (is_integral(epoch_length) and epoch_length > 0):
            raise ValueError(
                "epoch_length must be a positive integer to calculate missing 'iteration' or 'epoch' key. "
                f"Input state_dict: {state_dict}"
            )
        elif "epoch" in state_dict:
            state_dict["iteration"] = state_dict["epoch"] * epoch_length
        else:
            state_dict["epoch"] = state_dict["iteration"] // epoch_length
    for key in required_keys:
        if key not in state_dict:
            raise ValueError(
                f"Required state attribute '{key}' is absent in provided state_dict '{state_dict.keys()}': "
                "pass what engine.state_dict() returned."
            )
    limit_names = one_of_keys[0]
    limits = [k for k in limit_names if k in state_dict]
    if len(limits) != 1:
        raise ValueError(f"state_dict should contain exactly one of '{limit_names}' keys; got keys {list(state_dict)}.")
    for key in user_keys:
        if key not in state_dict:
            raise ValueError(
                f"Required user state attribute '{key}' is absent in provided state_dict "
                f"'{state_dict.keys()}': save it with the state, or remove it from engine.state_dict_user_keys."
            )
    epoch_length = state_dict["epoch_length"]
    if epoch_length is not None and not (
        is_integral(epoch_length) and not isinstance(epoch_length, bool) and epoch_length > 0
    ):
        raise ValueError(f"state_dict['epoch_length'] must be a positive integer or None, got {epoch_length!r}.")
    for counter in ("iteration", "epoch"):
        if counter not in state_dict:
            continue
        value = state_dict[counter]
        if not (is_integral(value) and value >= 0):
            raise ValueError(f"state_dict['{counter}'] must be an integer >= 0, got {value!r}.")
    iteration = int(state_dict["iteration"])
    epoch = iteration // epoch_length if epoch_length is not None else 0
    limit_name = limits[0]
    limit = state_dict[limit_name]  # None: the state of an engine that never ran (Ignite round-trips it)
    if limit is not None:
        if not is_integral(limit) or isinstance(limit, bool):
            raise ValueError(f"state_dict['{limit_name}'] must be a positive integer or None, got {limit!r}.")
        if limit < 1:
            raise ValueError(
                f"Argument {limit_name} is invalid. Please, set a correct {limit_name} positive value "
                f"(state_dict['{limit_name}'] is {limit})."
            )
        progress_name, progress = ("epoch", epoch) if limit_name == "max_epochs" else ("iteration", iteration)
        if limit < progress:
            raise ValueError(
                f"Argument {limit_name} should be greater than or equal to the start {progress_name} defined in "
                f"the state: {limit} vs {progress}. Please, set engine.state.{limit_name} = None before calling "
                "engine.run() in order to restart the training from the beginning."
            )

    state.epoch_length = epoch_length
    state.iteration = iteration
    state.epoch = epoch
    state.max_epochs = limit if limit_name == "max_epochs" else None
    state.max_iters = limit if limit_name == "max_iters" else None
    for key in user_keys:
        setattr(state, key, state_dict[key])
