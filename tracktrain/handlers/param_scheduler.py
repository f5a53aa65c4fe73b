"""Parameter schedulers for the Engine, as PyTorch-Ignite's `ignite.handlers.param_scheduler`: a handler that sets
an optimizer parameter (the learning rate, momentum, ...) of every param group each time its event fires.

- `ParamScheduler` (`BaseParamScheduler` for a scheduled value that is not an optimizer's): the call number
  `event_index` sets the schedule's value number `event_index`, so attached to `Events.ITERATION_STARTED` (the
  default of `attach`) iteration i trains with value i - 1;
- cyclical schedules: `LinearCyclicalScheduler`, `CosineAnnealingScheduler` (with Ignite's `cycle_mult`,
  `start_value_mult`, `end_value_mult` and `warmup_duration`), and `PiecewiseLinear` between milestones;
- combinations: `ConcatScheduler` (one scheduler after the other, for given durations), `ParamGroupScheduler` (one
  scheduler per param group), `create_lr_scheduler_with_warmup` (a linear warm-up, then any scheduler);
- torch's schedulers: `LRScheduler` (it calls the torch scheduler's own `step()`, see its docstring) and
  `ReduceLROnPlateauScheduler` (from a metric of an evaluator);
- `BatchSizeScheduler`: the batch size of a DataLoader's BatchSampler.

Every scheduler saves and loads its position (`state_dict` / `load_state_dict`), so a `Checkpoint` of it resumes
the schedule where it stopped; `simulate_values(num_events, **kwargs)` lists the values a scheduler would set,
`plot_values` draws them (matplotlib).
"""

from __future__ import annotations

import copy
import math
import numbers
import operator
import warnings
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler as TorchLRScheduler
from torch.optim.lr_scheduler import ReduceLROnPlateau

from tracktrain.engine.engine import Engine
from tracktrain.engine.events import Events

__all__ = [
    "BaseParamScheduler",
    "BatchSizeScheduler",
    "ConcatScheduler",
    "CosineAnnealingScheduler",
    "CyclicalScheduler",
    "LRScheduler",
    "LinearCyclicalScheduler",
    "ParamGroupScheduler",
    "ParamScheduler",
    "PiecewiseLinear",
    "ReduceLROnPlateauScheduler",
    "create_lr_scheduler_with_warmup",
]

# Events that fire before the iteration's optimizer step (see LRScheduler)
_BEFORE_OPTIMIZER_STEP = frozenset({"ITERATION_STARTED", "EPOCH_STARTED", "STARTED", "GET_BATCH_STARTED"})


def _record_history(engine: Engine | None, name: str, values: Any) -> None:
    """Append `values` to `engine.state.param_history[name]` (Ignite's `save_history`)."""
    if engine is None:
        return
    history = getattr(engine.state, "param_history", None)
    if history is None:
        history = engine.state.param_history = {}
    history.setdefault(name, []).append(values)


def _missing_state(owner: str, state_dict: Any, required: Sequence[str]) -> None:
    if not isinstance(state_dict, Mapping):
        raise TypeError(
            f"Argument state_dict should be a dictionary, but given {type(state_dict)}: pass the dict returned by "
            f"{owner}.state_dict()."
        )
    missing = [name for name in required if name not in state_dict]
    if missing:
        raise ValueError(
            f"Required state attribute(s) {missing} are absent in provided state_dict {list(state_dict)}; pass the "
            f"dict returned by {owner}.state_dict()."
        )


def _fake_optimizer(lr: float = 0.01) -> Optimizer:
    """The optimizer `simulate_values` schedules (Ignite's: SGD over one zero tensor, lr 0.01)."""
    return torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)


class BaseParamScheduler(ABC):
    """A handler that schedules one value, `param_name`, one value per call; what it sets is the subclass's.

    Attributes listed in `_state_attrs` are what `state_dict()` saves (an attribute with its own `state_dict`, a
    torch scheduler, saves that) and what `load_state_dict` requires.
    """

    def __init__(self, param_name: str, save_history: bool = False) -> None:
        if not isinstance(param_name, str):
            raise TypeError(f"{type(self).__name__}: param_name must be a str (e.g. 'lr'), got {param_name!r}.")
        self.param_name = param_name
        self.event_index = 0
        self._save_history = bool(save_history)
        self._state_attrs = ["event_index", "param_name", "save_history"]

    @property
    def save_history(self) -> bool:
        """Whether each call appends the values set to `engine.state.param_history[name]`."""
        return self._save_history

    @save_history.setter
    def save_history(self, value: bool) -> None:
        self._save_history = bool(value)

    def state_dict(self) -> OrderedDict[str, Any]:
        """The scheduler's position and settings (`_state_attrs`), copied."""
        state: OrderedDict[str, Any] = OrderedDict()
        for name in self._state_attrs:
            value = getattr(self, name)
            state[name] = value.state_dict() if hasattr(value, "state_dict") else copy.copy(value)
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue from `state_dict()`: the next call sets the value the saved scheduler's next call would have."""
        _missing_state(type(self).__name__, state_dict, self._state_attrs)
        for name in self._state_attrs:
            value, current = state_dict[name], getattr(self, name)
            if isinstance(value, Mapping) and hasattr(current, "load_state_dict"):
                current.load_state_dict(value)
            else:
                setattr(self, name, value)

    @abstractmethod
    def get_param(self) -> Any:
        """The value the scheduler sets at its current `event_index` (one per param group, or one for all)."""

    @classmethod
    @abstractmethod
    def simulate_values(cls, num_events: int, **scheduler_kwargs: Any) -> list[list[Any]]:
        """`[[event, value], ...]` for `num_events` calls of a scheduler built with `scheduler_kwargs`."""

    @classmethod
    def plot_values(cls, num_events: int, **scheduler_kwargs: Any) -> Any:
        """Plot `simulate_values(num_events, **scheduler_kwargs)` on the current matplotlib axes; returns the lines."""
        try:
            import matplotlib.pyplot as plt
        except ImportError as error:
            raise ModuleNotFoundError(
                f"{cls.__name__}.plot_values needs matplotlib ({error}): pip install matplotlib"
            ) from error
        values = cls.simulate_values(num_events=num_events, **scheduler_kwargs)
        label = scheduler_kwargs.get("param_name", "learning rate")
        lines = plt.plot([row[0] for row in values], [row[1:] for row in values], label=label)
        plt.legend()
        plt.grid(which="both")
        return lines


class ParamScheduler(BaseParamScheduler):
    """Sets `param_name` of the optimizer's param groups (all, or only `param_group_index`) each call.

    Attach to `Events.ITERATION_STARTED` (`scheduler.attach(trainer)`) for a value per iteration, or to
    `Events.EPOCH_STARTED` for one per epoch. `get_param()` may return one value for every group or a list of one
    per group.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        param_name: str,
        save_history: bool = False,
        param_group_index: int | None = None,
    ) -> None:
        super().__init__(param_name, save_history)
        if not (
            isinstance(optimizer, Optimizer)
            or (hasattr(optimizer, "param_groups") and isinstance(optimizer.param_groups, Sequence))
        ):
            raise TypeError(
                "Argument optimizer should be torch.optim.Optimizer or has attribute 'param_groups' as list/tuple, "
                f"but given {type(optimizer)}: pass the optimizer whose {param_name!r} this schedules."
            )
        if param_group_index is not None and not (
            isinstance(param_group_index, int) and 0 <= param_group_index < len(optimizer.param_groups)
        ):
            raise ValueError(
                f"{type(self).__name__}: param_group_index={param_group_index!r} is not the index of one of the "
                f"optimizer's {len(optimizer.param_groups)} param groups; pass 0 to {len(optimizer.param_groups) - 1} "
                "or None (all groups)."
            )
        self.optimizer = optimizer
        self.param_group_index = param_group_index
        self._state_attrs += ["param_group_index"]

    def attach(self, engine: Engine, event: Any = Events.ITERATION_STARTED) -> None:
        """Call this scheduler on `event` of `engine` (by default every ITERATION_STARTED)."""
        engine.add_event_handler(event, self)

    def __call__(self, engine: Engine | None = None, name: str | None = None) -> None:
        value = self._get_param()
        groups = self.optimizer_param_groups
        if isinstance(value, list):
            if len(value) != len(groups):
                raise ValueError(
                    f"size of value is different than optimizer_param_groups {len(value)} != {len(groups)}: "
                    f"{type(self).__name__}.get_param() returned {value!r}; return one value, or one per param group."
                )
            for group, group_value in zip(groups, value):
                group[self.param_name] = group_value
        else:
            for group in groups:
                group[self.param_name] = value
        if self.save_history:
            _record_history(engine, name or self.param_name, [group[self.param_name] for group in groups])
        self.event_index += 1

    @property
    def optimizer_param_groups(self) -> list[dict[str, Any]]:
        """The param groups this scheduler sets: all of the optimizer's, or the one at `param_group_index`."""
        if self.param_group_index is None:
            return self.optimizer.param_groups
        return [self.optimizer.param_groups[self.param_group_index]]

    def _get_param(self) -> Any:
        return self.get_param()

    @classmethod
    def simulate_values(cls, num_events: int, **scheduler_kwargs: Any) -> list[list[Any]]:
        """`[[event, value], ...]`: the value of the first param group after each of `num_events` calls of a
        scheduler built with `scheduler_kwargs` over a stand-in optimizer (`optimizer` and `save_history` given
        are not used)."""
        kwargs = {k: v for k, v in scheduler_kwargs.items() if k not in ("optimizer", "save_history")}
        scheduler = cls(optimizer=_fake_optimizer(), save_history=False, **kwargs)
        values = []
        for event in range(num_events):
            scheduler(engine=None)
            values.append([event, scheduler.optimizer_param_groups[0][scheduler.param_name]])
        return values


def _check_number(owner: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{owner}: {name} must be a number, got {value!r}.")


class CyclicalScheduler(ParamScheduler):
    """A value that goes from `start_value` to `end_value` (and, non-monotonic, back) over `cycle_size` events,
    cycle after cycle; subclasses give the shape (`get_param` at `event_index / cycle_size` of the cycle).

    Args:
        cycle_mult: each cycle is this many times as long as the one before.
        start_value_mult, end_value_mult: after each cycle the start / end value is multiplied by these.
        warmup_duration: events at the end of each cycle that go linearly back from the end value to the start
            value (monotonic schedules).
    """

    start_value: float
    end_value: float
    cycle_size: int
    cycle_mult: float
    cycle: int
    start_value_mult: float
    end_value_mult: float
    warmup_duration: int
    total_cycle_size: int

    def __init__(
        self,
        optimizer: Optimizer,
        param_name: str,
        start_value: float,
        end_value: float,
        cycle_size: int,
        cycle_mult: float = 1.0,
        start_value_mult: float = 1.0,
        end_value_mult: float = 1.0,
        warmup_duration: int = 0,
        save_history: bool = False,
        param_group_index: int | None = None,
    ) -> None:
        super().__init__(optimizer, param_name, save_history=save_history, param_group_index=param_group_index)
        owner = type(self).__name__
        for name, value in (
            ("start_value", start_value),
            ("end_value", end_value),
            ("cycle_mult", cycle_mult),
            ("start_value_mult", start_value_mult),
            ("end_value_mult", end_value_mult),
        ):
            _check_number(owner, name, value)
        if isinstance(cycle_size, bool) or not isinstance(cycle_size, numbers.Real) or cycle_size < 2:
            raise ValueError(
                f"Argument cycle_size should be positive and larger than 1, but given {cycle_size}: the number of "
                f"events of one cycle ({owner})."
            )
        if (
            isinstance(warmup_duration, bool)
            or not isinstance(warmup_duration, numbers.Integral)
            or warmup_duration < 0
        ):
            raise ValueError(f"{owner}: warmup_duration must be an int >= 0 (events), got {warmup_duration!r}.")
        self.start_value = start_value
        self.end_value = end_value
        self.cycle_size = int(cycle_size)
        self.cycle_mult = cycle_mult
        self.cycle = 0
        self.start_value_mult = start_value_mult
        self.end_value_mult = end_value_mult
        self.warmup_duration = int(warmup_duration)
        self.total_cycle_size = self.warmup_duration + self.cycle_size
        self._state_attrs += [
            "start_value",
            "end_value",
            "cycle_size",
            "cycle_mult",
            "cycle",
            "start_value_mult",
            "end_value_mult",
            "warmup_duration",
            "total_cycle_size",
        ]

    def __call__(self, engine: Engine | None = None, name: str | None = None) -> None:
        if self.event_index != 0 and self.event_index == self.cycle_size:
            self.start_value *= self.start_value_mult
        if self.event_index != 0 and self.event_index == self.total_cycle_size:
            # the next cycle
            self.event_index = 0
            self.cycle_size = int(self.cycle_size * self.cycle_mult)
            self.warmup_duration = int(self.warmup_duration * self.cycle_mult)
            self.total_cycle_size = self.warmup_duration + self.cycle_size
            self.cycle += 1
            self.end_value *= self.end_value_mult
        super().__call__(engine, name)

    def _get_param(self) -> Any:
        if self.event_index > self.cycle_size:  # the warm-up back to the start value, after the cycle
            progress = (self.event_index - self.cycle_size) / self.warmup_duration
            return self.end_value + (self.start_value - self.end_value) * progress
        return self.get_param()


class LinearCyclicalScheduler(CyclicalScheduler):
    """Linearly from `start_value` to `end_value` at mid-cycle and back; `monotonic=True`: to `end_value` at the
    cycle's end only (with `warmup_duration` events back to the start)."""

    def __init__(self, *args: Any, monotonic: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.monotonic = bool(monotonic)
        if self.warmup_duration > 0 and not self.monotonic:
            raise ValueError(
                "Invalid combination when warmup_duration > 0 and monotonic=False, please use either set "
                f"warmup_duration=0 or monotonic=True (got warmup_duration={self.warmup_duration})."
            )

    def get_param(self) -> float:
        progress = self.event_index / self.cycle_size
        if self.monotonic:
            return self.start_value + (self.end_value - self.start_value) * progress
        return self.end_value + (self.start_value - self.end_value) * abs(progress - 0.5) * 2


class CosineAnnealingScheduler(CyclicalScheduler):
    """Half a cosine from `start_value` to `end_value` over each cycle (SGDR, Loshchilov & Hutter 2016)."""

    def get_param(self) -> float:
        progress = self.event_index / self.cycle_size
        return self.start_value + (self.end_value - self.start_value) / 2 * (1 - math.cos(math.pi * progress))


class PiecewiseLinear(ParamScheduler):
    """Linear between `milestones_values` `[(event, value), ...]`: the first value before the first milestone, the
    last one after the last."""

    def __init__(
        self,
        optimizer: Optimizer,
        param_name: str,
        milestones_values: Sequence[tuple[int, float]],
        save_history: bool = False,
        param_group_index: int | None = None,
    ) -> None:
        super().__init__(optimizer, param_name, save_history, param_group_index=param_group_index)
        if not isinstance(milestones_values, Sequence):
            raise TypeError(
                f"Argument milestones_values should be a list or tuple, but given {type(milestones_values)}: pass "
                "[(event, value), ...]."
            )
        if len(milestones_values) < 1:
            raise ValueError(
                f"Argument milestones_values should be with at least one value, but given {milestones_values}."
            )
        milestones: list[int] = []
        values: list[float] = []
        for pair in milestones_values:
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise ValueError(
                    f"Argument milestones_values should be a list of pairs (milestone, param_value), got {pair!r}."
                )
            milestone, value = pair
            if not isinstance(milestone, numbers.Integral):
                raise TypeError(f"Value of a milestone should be integer, but given {type(milestone)} ({milestone!r}).")
            if milestones and milestone < milestones[-1]:
                raise ValueError(
                    f"Milestones should be increasing integers, but given {milestone} is smaller than the previous "
                    f"milestone {milestones[-1]}."
                )
            milestones.append(int(milestone))
            values.append(value)
        self.milestones = milestones
        self.values = values
        self._index = 0
        self._state_attrs += ["values", "milestones", "_index"]

    def get_param(self) -> float:
        event = self.event_index
        if event < self.milestones[0]:
            return self.values[0]
        if event >= self.milestones[-1]:
            return self.values[-1]
        while not self.milestones[self._index] <= event < self.milestones[self._index + 1]:
            self._index += 1
        start, end = self.milestones[self._index], self.milestones[self._index + 1]
        start_value, end_value = self.values[self._index], self.values[self._index + 1]
        return start_value + (end_value - start_value) * (event - start) / (end - start)


class ParamGroupScheduler:
    """Several schedulers called together, typically one per param group (`param_group_index`), each recording
    its history under its own name in `names`."""

    def __init__(
        self, schedulers: Sequence[ParamScheduler], names: Sequence[str] | None = None, save_history: bool = False
    ) -> None:
        if not isinstance(schedulers, Sequence):
            raise TypeError(f"Argument schedulers should be a list/tuple, but given {schedulers}.")
        if not all(isinstance(scheduler, ParamScheduler) for scheduler in schedulers):
            raise ValueError(
                f"Argument schedulers should be a list/tuple of parameter schedulers, but given {schedulers}."
            )
        if names is None:
            names = [scheduler.param_name for scheduler in schedulers]
        if not isinstance(names, (list, tuple)):
            raise TypeError(f"Argument names should be a list/tuple, but given {names}.")
        if not all(isinstance(name, str) for name in names):
            raise ValueError(
                f"Argument names should be a list/tuple of parameter scheduler's names, but given {names}."
            )
        if len(names) != len(schedulers):
            raise ValueError(f"{len(schedulers)} should be equal {len(names)}: one name per scheduler.")
        self.schedulers = list(schedulers)
        self.names = list(names)
        for scheduler in self.schedulers:
            scheduler.save_history = save_history
        self.optimizer = [scheduler.optimizer for scheduler in self.schedulers]
        self.param_name = [scheduler.param_name for scheduler in self.schedulers]

    def __call__(self, engine: Engine | None = None, name: str | None = None) -> None:
        for scheduler, scheduler_name in zip(self.schedulers, self.names):
            scheduler(engine, scheduler_name)

    @property
    def optimizer_param_groups(self) -> list[dict[str, Any]]:
        return [group for scheduler in self.schedulers for group in scheduler.optimizer_param_groups]

    @property
    def save_history(self) -> bool:
        return self.schedulers[0].save_history

    @save_history.setter
    def save_history(self, value: bool) -> None:
        for scheduler in self.schedulers:
            scheduler.save_history = value

    def get_param(self) -> list[Any]:
        return [scheduler.get_param() for scheduler in self.schedulers]

    def state_dict(self) -> OrderedDict[str, Any]:
        """`{"schedulers": [(name, state), ...]}`."""
        return OrderedDict([("schedulers", [(name, s.state_dict()) for name, s in zip(self.names, self.schedulers)])])

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        _missing_state("ParamGroupScheduler", state_dict, ["schedulers"])
        states = state_dict["schedulers"]
        if len(states) != len(self.schedulers):
            raise ValueError(
                f"Input state_dict contains {len(states)} state_dicts of param group schedulers, but "
                f"{len(self.schedulers)} needed."
            )
        for expected, scheduler, (name, state) in zip(self.names, self.schedulers, states):
            if name != expected:
                raise ValueError(
                    "Name of scheduler from input state dict does not correspond to required one, "
                    f"{name} vs {expected}."
                )
            scheduler.load_state_dict(state)

    @classmethod
    def simulate_values(cls, num_events: int, schedulers: Sequence[ParamScheduler], **kwargs: Any) -> list[list[Any]]:
        """`[[event, value of each scheduler], ...]` for `num_events` calls; the schedulers and their optimizer are
        left as they were."""
        with _kept_as_they_are(schedulers):
            group = cls(schedulers=schedulers, **kwargs)
            values = []
            for event in range(num_events):
                values.append([event, *(scheduler.get_param() for scheduler in schedulers)])
                group(engine=None)
        return values


class _kept_as_they_are:
    """Within the block, schedulers (and their optimizers) may be called; on leaving, their states are restored.
    torch's warning that a scheduler steps before its optimizer is silenced there: a simulation takes no optimizer
    step."""

    def __init__(self, schedulers: Sequence[Any]) -> None:
        self.schedulers = schedulers
        optimizers: list[Any] = []
        for scheduler in schedulers:
            for optimizer in scheduler.optimizer if isinstance(scheduler.optimizer, list) else [scheduler.optimizer]:
                if all(optimizer is not other for other in optimizers):
                    optimizers.append(optimizer)
        self.optimizers = optimizers

    def __enter__(self) -> None:
        self.states = [copy.deepcopy(s.state_dict()) for s in self.schedulers]
        self.optimizer_states = [copy.deepcopy(o.state_dict()) for o in self.optimizers]
        self.warnings = warnings.catch_warnings()
        self.warnings.__enter__()
        warnings.filterwarnings(
            "ignore", message=r"Detected call of `lr_scheduler.step\(\)` before", category=UserWarning
        )

    def __exit__(self, *exc_info: Any) -> None:
        self.warnings.__exit__(*exc_info)
        for scheduler, state in zip(self.schedulers, self.states):
            scheduler.load_state_dict(state)
        for optimizer, state in zip(self.optimizers, self.optimizer_states):
            optimizer.load_state_dict(state)


def _the_one(owner: str, what: str, values: list[Any], same: Callable[[Any, Any], bool]) -> Any:
    """The one optimizer (or parameter name) of `values`, where a ParamGroupScheduler gives a list of them."""
    distinct: list[Any] = []
    for value in values:
        for item in value if isinstance(value, list) else [value]:
            if not any(same(item, other) for other in distinct):
                distinct.append(item)
    if len(distinct) != 1:
        raise ValueError(f"schedulers should be related to same {what}; {owner} got {len(distinct)} different ones.")
    return distinct[0]


class ConcatScheduler(ParamScheduler):
    """`schedulers[0]` for `durations[0]` events, then `schedulers[1]` for `durations[1]`, ..., the last one
    for the rest; all of the same optimizer and parameter."""

    def __init__(
        self,
        schedulers: Sequence[ParamScheduler | ParamGroupScheduler],
        durations: Sequence[int],
        save_history: bool = False,
    ) -> None:
        if not isinstance(schedulers, Sequence):
            raise TypeError(f"Argument schedulers should be a sequence, but given {schedulers}.")
        if len(schedulers) < 2:
            raise ValueError(
                f"Argument schedulers should be of more than one parameter schedulers, but given {schedulers}."
            )
        if not isinstance(durations, (list, tuple)):
            raise TypeError(f"Argument durations should be list/tuple, but given {durations}.")
        if not all(isinstance(duration, numbers.Integral) for duration in durations):
            raise ValueError(f"Argument durations should be list/tuple of integers, but given {durations}.")
        if len(schedulers) != len(durations) + 1:
            raise ValueError(
                f"Incorrect number schedulers or duration values, given {len(schedulers)} and {len(durations)}: "
                "one duration for each scheduler but the last."
            )
        for i, scheduler in enumerate(schedulers):
            if not isinstance(scheduler, (ParamScheduler, ParamGroupScheduler)):
                raise TypeError(
                    f"Value at index {i} of schedulers should be a parameter scheduler, but given {type(scheduler)}."
                )
        self.schedulers = list(schedulers)
        self.durations = list(durations)
        optimizer = _the_one("ConcatScheduler", "optimizer", [s.optimizer for s in self.schedulers], operator.is_)
        param_name = _the_one("ConcatScheduler", "param_name", [s.param_name for s in self.schedulers], operator.eq)
        for scheduler in self.schedulers:
            scheduler.save_history = save_history
        super().__init__(optimizer=optimizer, param_name=param_name, save_history=save_history)
        self._scheduler_index = 0
        self._setup_scheduler()
        self._state_attrs += ["_current_duration", "durations", "_scheduler_index"]

    def _setup_scheduler(self) -> None:
        self._current_scheduler = self.schedulers[self._scheduler_index]
        index = self._scheduler_index
        self._current_duration = self.durations[index] if index < len(self.durations) else -1

    def __call__(self, engine: Engine | None = None, name: str | None = None) -> None:
        if self._current_duration == 0:
            self._scheduler_index += 1
            self._setup_scheduler()
        self._current_scheduler(engine, name)
        self._current_duration -= 1

    @property
    def optimizer_param_groups(self) -> list[dict[str, Any]]:
        return self._current_scheduler.optimizer_param_groups

    @property
    def save_history(self) -> bool:
        return self._current_scheduler.save_history

    @save_history.setter
    def save_history(self, value: bool) -> None:
        for scheduler in self.schedulers:
            scheduler.save_history = value

    def get_param(self) -> Any:
        return self._current_scheduler.get_param()

    def state_dict(self) -> OrderedDict[str, Any]:
        state = super().state_dict()
        state["schedulers"] = [scheduler.state_dict() for scheduler in self.schedulers]
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        _missing_state("ConcatScheduler", state_dict, ["schedulers"])
        states = state_dict["schedulers"]
        if len(states) != len(self.schedulers):
            raise ValueError(
                f"Input state_dict contains {len(states)} state_dicts of concatenated schedulers, but "
                f"{len(self.schedulers)} needed."
            )
        for scheduler, state in zip(self.schedulers, states):
            scheduler.load_state_dict(state)
        super().load_state_dict({k: v for k, v in state_dict.items() if k != "schedulers"})
        self._current_scheduler = self.schedulers[self._scheduler_index]

    @classmethod
    def simulate_values(  # type: ignore[override]
        cls,
        num_events: int,
        schedulers: Sequence[ParamScheduler | ParamGroupScheduler],
        durations: Sequence[int],
        param_names: Sequence[str] | None = None,
    ) -> list[list[Any]]:
        """`[[event, value of each param group, ...], ...]` for `num_events` calls (for each of `param_names`,
        default the schedulers' parameter); the schedulers and their optimizer are left as they were."""
        if param_names is not None:
            if not isinstance(param_names, (list, tuple)):
                raise TypeError(f"Argument param_names should be list or tuple, but given {type(param_names)}.")
            if not all(isinstance(name, str) for name in param_names):
                raise ValueError(f"Argument param_names should be list or tuple of strings, but given {param_names}.")
        _the_one("ConcatScheduler", "optimizer", [s.optimizer for s in schedulers], operator.is_)
        with _kept_as_they_are(schedulers):
            concat = cls(schedulers=schedulers, durations=durations, save_history=False)
            names = list(param_names) if param_names is not None else [concat.param_name]
            output = []
            for event in range(num_events):
                concat(engine=None)
                row: list[Any] = [event]
                for name in names:
                    row.extend(group[name] for group in concat.optimizer_param_groups)
                output.append(row)
        return output


class LRScheduler(ParamScheduler):
    """Drives a `torch.optim.lr_scheduler` scheduler from Engine events, by calling its own `step()`.

    .. code-block:: python

        scheduler = LRScheduler(torch.optim.lr_scheduler.StepLR(optimizer, step_size=30, gamma=0.1))
        trainer.add_event_handler(Events.ITERATION_STARTED, scheduler)  # Ignite's way, or
        trainer.add_event_handler(Events.ITERATION_COMPLETED, scheduler)  # torch's order, the same rates

    Either way iteration i trains with the rate torch gives after i - 1 `step()` calls, exactly what a hand-written
    loop gets: attached to an event before the optimizer step (ITERATION_STARTED, EPOCH_STARTED), the first call
    keeps the optimizer's rate and each later call steps once; attached after it (ITERATION_COMPLETED,
    EPOCH_COMPLETED) every call steps. What differs from Ignite, on purpose: Ignite's handler recomputes the rates
    with `get_lr()` instead of calling `step()`, which with recent torch skips the first rate of `ExponentialLR`
    and `CosineAnnealingWarmRestarts` and fails on `SequentialLR` (here every torch scheduler behaves as torch
    documents it); and attached to ITERATION_COMPLETED Ignite's trains the second iteration with the first rate
    again (one step behind torch) unless `use_legacy=True`.

    Args:
        lr_scheduler: a `torch.optim.lr_scheduler` scheduler (not `ReduceLROnPlateau`: use
            `ReduceLROnPlateauScheduler`).
        save_history: append the learning rates each iteration trains with (one list per call, one value per
            param group) to `engine.state.param_history["lr"]`, as Ignite does.
        use_legacy: step from the very first call, whatever the event (Ignite's flag for handlers attached to
            ITERATION_COMPLETED; after ITERATION_STARTED it skips the first rate, as in Ignite).
    """

    def __init__(self, lr_scheduler: TorchLRScheduler, save_history: bool = False, use_legacy: bool = False) -> None:
        if isinstance(lr_scheduler, ReduceLROnPlateau):
            raise TypeError(
                "LRScheduler cannot drive ReduceLROnPlateau: its step() needs the monitored metric. Use "
                "ReduceLROnPlateauScheduler(optimizer, metric_name=...) attached to the evaluator's COMPLETED, or call "
                "scheduler.step(engine.state.metrics[...]) from a handler."
            )
        if not isinstance(lr_scheduler, TorchLRScheduler):
            raise TypeError(
                f"Argument lr_scheduler should be a subclass of torch.optim.lr_scheduler.LRScheduler, but given "
                f"{type(lr_scheduler)}: pass a scheduler such as StepLR(optimizer, ...) (got {lr_scheduler!r})."
            )
        self.lr_scheduler = lr_scheduler
        super().__init__(optimizer=lr_scheduler.optimizer, param_name="lr", save_history=save_history)
        # whether the first call steps: decided by the first event unless use_legacy says so
        self._first_call_steps: bool | None = True if use_legacy else None
        self._state_attrs += ["lr_scheduler"]

    def __call__(self, engine: Engine | None = None, name: str | None = None) -> None:
        """Step the torch scheduler (not on the first call from an event before the optimizer step) and record the
        rates the iteration trains with."""
        event = getattr(engine.last_event_name, "name", None) if engine is not None else None
        before_step = event in _BEFORE_OPTIMIZER_STEP
        if self._first_call_steps is None:
            self._first_call_steps = not before_step
        name = name or self.param_name
        if self.save_history and not before_step:  # the rates the iteration that just ended used
            _record_history(engine, name, [group["lr"] for group in self.optimizer.param_groups])
        if self.event_index > 0 or self._first_call_steps:
            self.lr_scheduler.step()
        if self.save_history and before_step:  # the rates the iteration about to run uses
            _record_history(engine, name, [group["lr"] for group in self.optimizer.param_groups])
        self.event_index += 1

    def get_param(self) -> float | torch.Tensor | list[float | torch.Tensor]:
        """The learning rate(s) the optimizer holds now: one value, or one per param group (a tensor where the
        optimizer was given a tensor learning rate)."""
        lrs = self.lr_scheduler.get_last_lr()
        return lrs[0] if len(lrs) == 1 else list(lrs)

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore from `state_dict()`; load the optimizer's own state_dict too, so its lr matches."""
        super().load_state_dict(state_dict)
        if self.event_index > 0 and self._first_call_steps is None:
            self._first_call_steps = True  # a resumed schedule steps at every call

    @classmethod
    def simulate_values(  # type: ignore[override]
        cls, num_events: int, lr_scheduler: TorchLRScheduler, **kwargs: Any
    ) -> list[list[Any]]:
        """`[[event, lr of each param group], ...]`: the rates of `num_events` iterations (as attached to
        ITERATION_STARTED); `lr_scheduler` and its optimizer are left as they were."""
        if not isinstance(lr_scheduler, TorchLRScheduler):
            raise TypeError(
                "Argument lr_scheduler should be a subclass of torch.optim.lr_scheduler.LRScheduler, but given "
                f"{type(lr_scheduler)}."
            )
        scheduler = cls(lr_scheduler=lr_scheduler, save_history=False, **kwargs)
        values = []
        with _kept_as_they_are([scheduler]):
            for event in range(num_events):
                values.append([event, *(group["lr"] for group in lr_scheduler.optimizer.param_groups)])
                scheduler(engine=None)
        return values


def create_lr_scheduler_with_warmup(
    lr_scheduler: ParamScheduler | TorchLRScheduler,
    warmup_start_value: float,
    warmup_duration: int,
    warmup_end_value: float | None = None,
    save_history: bool = False,
    output_simulated_values: list[Any] | None = None,
) -> ConcatScheduler:
    """A linear warm-up from `warmup_start_value` to `warmup_end_value` (default: each param group's lr) over
    `warmup_duration` events, then `lr_scheduler` (a torch scheduler or a ParamScheduler), as Ignite builds it.
    Attach the result to `Events.ITERATION_STARTED`. `output_simulated_values`, a list of `N` Nones, is filled
    with the first N `[event, lr]` values."""
    if not isinstance(lr_scheduler, (ParamScheduler, TorchLRScheduler)):
        raise TypeError(
            "Argument lr_scheduler should be a subclass of torch.optim.lr_scheduler.LRScheduler or ParamScheduler, "
            f"but given {type(lr_scheduler)}."
        )
    if isinstance(warmup_duration, bool) or not isinstance(warmup_duration, int):
        raise TypeError(f"Argument warmup_duration should be integer, but given {warmup_duration}.")
    if not warmup_duration > 1:
        raise ValueError(f"Argument warmup_duration should be at least 2 events, but given {warmup_duration}.")
    _check_number("create_lr_scheduler_with_warmup", "warmup_start_value", warmup_start_value)
    if output_simulated_values is not None and not isinstance(output_simulated_values, list):
        raise TypeError(
            "Argument output_simulated_values should be a list of None, e.g. `[None] * 100`, but given "
            f"{type(output_simulated_values)}."
        )
    optimizer = lr_scheduler.optimizer
    warmups: list[ParamScheduler] = []
    milestones_values: list[tuple[int, float]] = []
    for index, group in enumerate(optimizer.param_groups):
        end_value = group["lr"] if warmup_end_value is None else warmup_end_value
        milestones_values = [(0, warmup_start_value), (warmup_duration - 1, end_value)]
        if isinstance(lr_scheduler, TorchLRScheduler):
            if group["lr"] != end_value:  # then one more event: back to the group's own rate
                milestones_values.append((warmup_duration, group["lr"]))
        elif lr_scheduler.get_param() == end_value:
            # the scheduler starts at the warm-up's end value: end the warm-up one event earlier
            if warmup_duration > 2:
                step = (end_value - warmup_start_value) / (warmup_duration - 1)
                milestones_values[-1] = (warmup_duration - 2, end_value - step)
            else:
                milestones_values.pop(-1)
        warmups.append(
            PiecewiseLinear(
                optimizer,
                param_name="lr",
                milestones_values=milestones_values,
                param_group_index=index,
                save_history=save_history,
            )
        )
    after: ParamScheduler = (
        # the warm-up's last event set the scheduler's first rate: it steps from its first call
        LRScheduler(lr_scheduler, save_history=save_history, use_legacy=True)
        if isinstance(lr_scheduler, TorchLRScheduler)
        else lr_scheduler
    )
    schedulers: list[ParamScheduler | ParamGroupScheduler] = [
        ParamGroupScheduler(warmups, save_history=save_history),
        after,
    ]
    durations = [milestones_values[-1][0] + 1]
    combined = ConcatScheduler(schedulers, durations=durations, save_history=save_history)
    if output_simulated_values is not None:
        simulated = ConcatScheduler.simulate_values(
            num_events=len(output_simulated_values), schedulers=schedulers, durations=durations
        )
        output_simulated_values[:] = simulated
    return combined


class ReduceLROnPlateauScheduler(ParamScheduler):
    """torch's `ReduceLROnPlateau` on `engine.state.metrics[metric_name]`: attach to an evaluator's COMPLETED (or
    the trainer's EPOCH_COMPLETED); the history goes to `trainer`'s state when given.

    `scheduler_kwargs` are ReduceLROnPlateau's (`mode`, `factor`, `patience`, `threshold`, `threshold_mode`,
    `cooldown`, `min_lr`, `eps`). With `param_group_index` only that group's rate is reduced (`min_lr` must then be
    a float).
    """

    def __init__(
        self,
        optimizer: Optimizer,
        metric_name: str,
        trainer: Engine | None = None,
        save_history: bool = False,
        param_group_index: int | None = None,
        **scheduler_kwargs: Any,
    ) -> None:
        super().__init__(optimizer, "lr", save_history=save_history, param_group_index=param_group_index)
        if not isinstance(metric_name, str):
            raise TypeError(f"ReduceLROnPlateauScheduler: metric_name must be a str, got {metric_name!r}.")
        self.metric_name = metric_name
        self.trainer = trainer
        kwargs = dict(scheduler_kwargs)
        if "verbose" in kwargs:
            raise ValueError(
                "ReduceLROnPlateauScheduler: verbose is not taken (torch removed it; Ignite sets it to False with a "
                "warning); pass save_history=True to see the rates."
            )
        if param_group_index is not None and "min_lr" in kwargs:
            min_lr = kwargs["min_lr"]
            if not isinstance(min_lr, float):
                raise TypeError(
                    f"When param_group_index is given, min_lr should be a float, but given {type(min_lr)} ({min_lr!r})."
                )
            kwargs["min_lr"] = [min_lr if i == param_group_index else 0 for i in range(len(optimizer.param_groups))]
        self.scheduler = ReduceLROnPlateau(optimizer, **kwargs)
        self._state_attrs += ["metric_name", "scheduler"]

    def __call__(self, engine: Engine | None = None, name: str | None = None) -> None:
        if engine is None or self.metric_name not in engine.state.metrics:
            known = [] if engine is None else list(engine.state.metrics)
            raise ValueError(
                f"Argument engine should have in its 'state', attribute 'metrics' which itself has the metric "
                f"{self.metric_name}; the metrics are {known}. Attach it to the engine that computes the metric."
            )
        kept = [
            (group, group["lr"])
            for group in self.optimizer.param_groups
            if all(group is not own for own in self.optimizer_param_groups)
        ]
        self.scheduler.step(engine.state.metrics[self.metric_name])
        for group, lr in kept:  # only the scheduled group's rate is reduced
            group["lr"] = lr
        super().__call__(self.trainer, name)

    def get_param(self) -> float | list[float]:
        lrs = [group["lr"] for group in self.optimizer_param_groups]
        return lrs[0] if len(lrs) == 1 else lrs

    @classmethod
    def simulate_values(  # type: ignore[override]
        cls, num_events: int, metric_values: Sequence[float], init_lr: float, **scheduler_kwargs: Any
    ) -> list[list[Any]]:
        """`[[event, lr], ...]` for `metric_values`, one per event, starting from `init_lr`."""
        if len(metric_values) != num_events:
            raise ValueError(
                f"Length of argument metric_values should be equal to num_events. {len(metric_values)} != {num_events}"
            )
        kwargs = {k: v for k, v in scheduler_kwargs.items() if k not in ("optimizer", "metric_name", "save_history")}
        scheduler = cls(optimizer=_fake_optimizer(init_lr), metric_name="metric", save_history=False, **kwargs)
        engine = Engine(lambda engine, batch: None)
        values = []
        for event in range(num_events):
            engine.state.metrics["metric"] = metric_values[event]
            scheduler(engine=engine)
            values.append([event, scheduler.optimizer_param_groups[0]["lr"]])
        return values


class BatchSizeScheduler(BaseParamScheduler):
    """Sets the batch size of `dataloader`'s BatchSampler to `scheduler_fn(event_index)` each call (attach to
    EPOCH_STARTED, the default: a DataLoader's batch size changes between its passes)."""

    def __init__(
        self, dataloader: torch.utils.data.DataLoader, scheduler_fn: Callable[[int], int], save_history: bool = False
    ) -> None:
        super().__init__(param_name="batch_size", save_history=save_history)
        if not isinstance(dataloader, torch.utils.data.DataLoader):
            raise TypeError(f"Argument dataloader should be torch.utils.data.DataLoader, but given {type(dataloader)}.")
        if not isinstance(getattr(dataloader, "batch_sampler", None), torch.utils.data.BatchSampler):
            raise ValueError(
                "Argument dataloader should have a BatchSampler, i.e. dataloader.batch_sampler should be an instance "
                "of torch.utils.data.sampler.BatchSampler: build the DataLoader with batch_size=..."
            )
        if not callable(scheduler_fn):
            raise TypeError(f"Argument scheduler_fn should be callable, but given {type(scheduler_fn)}.")
        self.dataloader = dataloader
        self.scheduler_fn = scheduler_fn

    def __call__(self, engine: Engine | None = None) -> None:
        value = self.get_param()
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(
                f"Batch size returned by scheduler_fn should be a positive integer, but given {value} at event "
                f"{self.event_index}."
            )
        batch_sampler = self.dataloader.batch_sampler
        assert isinstance(batch_sampler, torch.utils.data.BatchSampler)  # checked when built
        batch_sampler.batch_size = value
        if self.save_history:
            _record_history(engine, self.param_name, value)
        self.event_index += 1

    def get_param(self) -> int:
        return self.scheduler_fn(self.event_index)

    def attach(self, engine: Engine, event: Any = Events.EPOCH_STARTED) -> None:
        engine.add_event_handler(event, self)

    @classmethod
    def simulate_values(cls, num_events: int, **scheduler_kwargs: Any) -> list[list[Any]]:
        if "scheduler_fn" not in scheduler_kwargs:
            raise ValueError("Argument scheduler_kwargs must contain 'scheduler_fn'.")
        scheduler_fn = scheduler_kwargs["scheduler_fn"]
        return [[event, scheduler_fn(event)] for event in range(num_events)]
