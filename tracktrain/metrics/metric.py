"""The Metric base class and MetricsLambda (arithmetic on metrics). Usages live in `usage.py`, the checks and
shaping of a metric's arguments and inputs in `inputs.py`, the all-reduce in `distributed.py`.

PyTorch-Ignite's `ignite.metrics.Metric` is the reference for names and behaviour: `reset()`, `update(output)`,
`compute()`, `attach(engine, name, usage)`, `detach`, `is_attached`, `output_transform`, arithmetic on metrics.

What is ours: `update()` only adds to tensors on the metric's device (by default the device of its inputs, so that
updates never copy across devices) and never reads a value back to the host;
`compute()` is where the one host sync of an epoch happens, and under torch.distributed the one all-reduce, done
for every metric by `all_reduce_sum`.

Every metric saves and loads what it accumulated (`state_dict` / `load_state_dict`, Ignite 0.5.5's format: one state
per rank), so a `Checkpoint` of it resumes exactly. Unlike Ignite, a loaded metric *continues* on the run it was
saved with: the reset at that run's STARTED (or at the EPOCH_STARTED of an epoch resumed in its middle) is skipped,
where Ignite's reset there throws the loaded state away (its resumed running average starts over).
"""

from __future__ import annotations

import operator
import weakref
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

from tracktrain.distributed.collectives import gather_objects
from tracktrain.distributed.ranks import rank_and_world_size
from tracktrain.engine.engine import Engine
from tracktrain.engine.events import Events
from tracktrain.metrics.inputs import (
    as_batch_of_one,
    as_device,
    identity,
    is_sequence_of_tensors_or_numbers,
)
from tracktrain.metrics.usage import EpochWise, MetricUsage, as_usage, same_events

__all__ = ["Metric", "MetricsLambda", "NotComputableError"]


class NotComputableError(RuntimeError):
    """`compute()` was called on a metric with nothing to compute from (no `update()` since its last `reset()`)."""


# the one key of a metric's state_dict (Ignite's): the list of every rank's state
STATE_PER_RANK = "__metric_state_per_rank"
# what a metric's saved state may hold (besides other metrics, and lists, tuples and dicts of these)
_STATE_LEAVES = (type(None), bool, int, float, str, torch.Tensor, torch.Size)


class Metric(ABC):
    """Base of all metrics: accumulate over `update(output)` calls, `compute()` the value, `reset()` to start over.

    Args:
        output_transform: turns the engine's `state.output` into what `update()` expects, by default
            `(y_pred, y)`. A mapping output is read at `required_output_keys`.
        device: where the accumulated state lives. None (default): on the device of `update()`'s inputs, settled
            by the first update after each `reset()` (the CPU for numbers and XLA inputs), so that updates never
            copy to another device (a copy from CUDA to the CPU would wait for the GPU). Ignite's default is the
            CPU; give `device="cpu"` to keep it there.
        skip_unrolling: do not split an output of two lists, `([y_pred_1, ...], [y_1, ...])`, into one update
            per pair (Ignite's behaviour for lists of per-sample tensors).

    Standalone use: `m.reset(); m.update((y_pred, y)); m.compute()`. Attached: `m.attach(engine, "name")` resets
    at EPOCH_STARTED, updates at ITERATION_COMPLETED and writes `engine.state.metrics["name"]` at EPOCH_COMPLETED.
    Subclasses set their own configuration before calling `super().__init__`, which calls `reset()`. Their
    `reset()` allocates state on `self._device` (the CPU until an update settles the device), and their `update()`
    calls `self._settle_device(inputs.device)` first: with device=None it resets once onto the inputs' device.
    """

    required_output_keys: tuple[str, ...] | None = ("y_pred", "y")
    # the attributes that hold what the metric accumulated: saved by state_dict(), required by load_state_dict()
    _state_dict_all_req_keys: tuple[str, ...] = ()

    def __init__(
        self,
        output_transform: Callable[[Any], Any] = identity,
        device: str | torch.device | None = None,
        skip_unrolling: bool = False,
    ) -> None:
        if not callable(output_transform):
            raise TypeError(f"{type(self).__name__}: output_transform must be callable, got {output_transform!r}.")
        self._output_transform = output_transform
        # None: the state follows the inputs (see _settle_device); until then it waits on the CPU
        self._requested_device = None if device is None else as_device(device, type(self).__name__)
        self._device = self._requested_device or torch.device("cpu")
        self._device_settled = self._requested_device is not None
        self._skip_unrolling = skip_unrolling
        # usages attached per engine, so that detaching one keeps the handlers another still needs
        self._attached_usages: weakref.WeakKeyDictionary[Engine, list[MetricUsage]] = weakref.WeakKeyDictionary()
        self._loaded = False  # load_state_dict since the last started(): the resumed run continues from it
        self.reset()

    @abstractmethod
    def reset(self) -> None:
        """Forget everything accumulated."""

    def _settle_device(self, inputs_device: torch.device) -> None:
        """Call first in update(): with device=None, the first update after reset() puts the state on its inputs'
        device, by resetting again there (nothing is accumulated yet, and zeros made on the device cost no sync)."""
        if self._device_settled:
            return
        # XLA inputs: accumulate on the CPU, as Ignite (per-update accumulation on XLA is slow)
        target = torch.device("cpu") if inputs_device.type == "xla" else inputs_device
        if target != self._device:
            self._device = target
            self.reset()
        self._device_settled = True

    def _unsettle_device(self) -> None:
        """Call in reset(): with device=None the next update settles the device again."""
        self._device_settled = self._requested_device is not None

    @abstractmethod
    def update(self, output: Any) -> None:
        """Accumulate one batch's output (already passed through `output_transform` when attached)."""

    @abstractmethod
    def compute(self) -> Any:
        """The value over everything accumulated since `reset()`. A Mapping is also written key by key into
        `engine.state.metrics` when attached. Raises NotComputableError when there is nothing to compute from."""

    # --------------------------------------------------------------------------------------- engine handlers
    def started(self, engine: Engine) -> None:
        """Reset, unless the state was just loaded and `engine` is resuming the run it was saved in."""
        loaded, self._loaded = self._loaded, False
        if loaded and _resumes_where_it_stopped(engine):
            return
        self.reset()

    @torch.no_grad()
    def iteration_completed(self, engine: Engine) -> None:
        output = self._output_transform(engine.state.output)
        if isinstance(output, Mapping):
            output = self._pick_required_keys(output)
        if (
            not self._skip_unrolling
            and isinstance(output, Sequence)
            and all(is_sequence_of_tensors_or_numbers(part) for part in output)
        ):
            # ([y_pred_1, y_pred_2, ...], [y_1, y_2, ...]): one update per sample, each a batch of one
            if not (len(output) == 2 and len(output[0]) == len(output[1])):
                lengths = [len(part) for part in output]
                raise ValueError(
                    f"{type(self).__name__}: an output of lists must be two lists of the same length "
                    f"(y_preds, ys), got {len(output)} lists of lengths {lengths}."
                )
            for y_pred, y in zip(output[0], output[1]):
                y_pred_batch = as_batch_of_one(y_pred)
                self.update((y_pred_batch, as_batch_of_one(y, y_pred_batch.device)))
        else:
            self.update(output)

    def _pick_required_keys(self, output: Mapping) -> tuple:
        name = type(self).__name__
        keys = self.required_output_keys
        if keys is None:
            example_key = next(iter(output), "key")
            raise TypeError(
                f"{name} takes the output itself, not a mapping; got a mapping with keys {list(output)}. Pass "
                f"output_transform to pick the value, e.g. output_transform=lambda out: out[{example_key!r}]."
            )
        missing = [key for key in keys if key not in output]
        if missing:
            raise ValueError(
                f"{name} reads the keys {list(keys)} from a mapping output, but {missing} are missing (keys given: "
                f"{list(output)}). Add them to the output or pass output_transform to build the tuple."
            )
        return tuple(output[key] for key in keys)

    def completed(self, engine: Engine, name: str) -> None:
        result = self.compute()
        metrics = engine.state.metrics
        if isinstance(result, Mapping):
            if name in result:
                raise ValueError(
                    f"Metric name {name!r} is also a key of the mapping it computes ({list(result)}); attach it "
                    "under another name."
                )
            metrics.update(result)
            metrics[name] = result
            return
        if isinstance(result, torch.Tensor):
            if result.ndim == 0:
                result = result.item()  # host sync, once per COMPLETED event
            elif result.device.type != "cpu":
                result = result.cpu()
        metrics[name] = result

    # ------------------------------------------------------------------------------------------------ attach
    def attach(self, engine: Engine, name: str, usage: str | MetricUsage = EpochWise()) -> None:
        """Compute this metric on `engine` per `usage` into `engine.state.metrics[name]`.

        Usages: EpochWise (default, "epoch_wise"), RunningEpochWise, BatchWise, RunningBatchWise,
        SingleEpochRunningBatchWise, or their `usage_name` strings. Attaching under several names or usages
        updates the metric once per event all the same.
        """
        if not isinstance(name, str):
            raise TypeError(f"{type(self).__name__}.attach: name must be a str, got {name!r}.")
        usage = as_usage(usage)
        if not engine.has_event_handler(self.started, usage.STARTED):
            engine.add_event_handler(usage.STARTED, self.started)
        if not engine.has_event_handler(self.iteration_completed, usage.ITERATION_COMPLETED):
            engine.add_event_handler(usage.ITERATION_COMPLETED, self.iteration_completed)
        engine.add_event_handler(usage.COMPLETED, self.completed, name)
        self._attached_usages.setdefault(engine, []).append(usage)

    def detach(self, engine: Engine, usage: str | MetricUsage = EpochWise()) -> None:
        """Stop computing this metric on `engine` for `usage`; does nothing where it is not attached.

        Unlike Ignite, the reset and update handlers stay while another usage attached on this engine needs them
        (detaching "batch_wise" leaves an "epoch_wise" attachment of the same metric working).
        """
        usage = as_usage(usage)
        if engine.has_event_handler(self.completed, usage.COMPLETED):
            engine.remove_event_handler(self.completed, usage.COMPLETED)
        others = [u for u in self._attached_usages.get(engine, []) if not same_events(u, usage)]
        self._attached_usages[engine] = others
        for event, handler, needed in (
            (usage.STARTED, self.started, any(u.STARTED == usage.STARTED for u in others)),
            (
                usage.ITERATION_COMPLETED,
                self.iteration_completed,
                any(u.ITERATION_COMPLETED == usage.ITERATION_COMPLETED for u in others),
            ),
        ):
            if not needed and engine.has_event_handler(handler, event):
                engine.remove_event_handler(handler, event)

    def is_attached(self, engine: Engine, usage: str | MetricUsage = EpochWise()) -> bool:
        return engine.has_event_handler(self.completed, as_usage(usage).COMPLETED)

    # ------------------------------------------------------------------------------------------------ state
    def state_dict(self) -> OrderedDict[str, list[OrderedDict[str, Any]]]:
        """What the metric accumulated, `{"__metric_state_per_rank": [state of rank 0, state of rank 1, ...]}` as in
        Ignite (under torch.distributed every rank must call it: the states are gathered)."""
        state = self._state_dict_per_rank()
        return OrderedDict([(STATE_PER_RANK, gather_objects(state))])

    def _state_dict_per_rank(self) -> OrderedDict[str, Any]:
        state: OrderedDict[str, Any] = OrderedDict()
        for name in self._state_dict_all_req_keys:
            if name not in self.__dict__:
                raise ValueError(
                    f"Found a value in _state_dict_all_req_keys that is not among metric attributes: {name} "
                    f"({type(self).__name__}); list only the attributes reset() sets."
                )
            state[name] = _saved(getattr(self, name), f"{type(self).__name__}.{name}")
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue from `state_dict()`: this rank's state is loaded (saved with the same number of ranks). On an
        engine resumed from the same checkpoint, the run goes on accumulating from it (see the module docstring)."""
        name = type(self).__name__
        if not isinstance(state_dict, Mapping):
            raise TypeError(
                f"Argument state_dict should be a dictionary, but given {type(state_dict)}: pass the dict returned by "
                f"{name}.state_dict()."
            )
        if not (len(state_dict) == 1 and STATE_PER_RANK in state_dict):
            raise ValueError(
                "Incorrect state_dict object. Argument state_dict should be a dictionary provided by "
                f"Metric.state_dict(). Expected single key: {STATE_PER_RANK}, but given {list(state_dict)} ({name})."
            )
        rank, world_size = rank_and_world_size()
        states = state_dict[STATE_PER_RANK]
        if len(states) != world_size:
            raise ValueError(
                "Incorrect state_dict object. Argument state_dict should be a dictionary provided by "
                "Metric.state_dict(). Expected a list of state_dicts of size equal world_size: "
                f"{world_size}, but got {len(states)} ({name} saved by {len(states)} processes; resume with as many)."
            )
        self._load_state_dict_per_rank(states[rank])

    def _load_state_dict_per_rank(self, state: Mapping[str, Any]) -> None:
        owner = type(self).__name__
        if not isinstance(state, Mapping):
            raise TypeError(f"{owner}.load_state_dict: a rank's state must be a dict, got {type(state).__name__}.")
        missing = [name for name in self._state_dict_all_req_keys if name not in state]
        if missing:
            raise ValueError(
                f"Required state attribute(s) {missing} are absent in provided state_dict {list(state)}; pass the dict "
                f"returned by {owner}.state_dict()."
            )
        for name in self._state_dict_all_req_keys:
            current = getattr(self, name)
            setattr(self, name, _loaded(current, state[name], self._device, f"{owner}.{name}"))
        self._device_settled = True  # the state stays where it was loaded: the next update must not reset it
        self._loaded = True

    # ------------------------------------------------------------------------------------------- composition
    def __add__(self, other: Any) -> MetricsLambda:
        return MetricsLambda(operator.add, self, other)

    def __radd__(self, other: Any) -> MetricsLambda:
        return MetricsLambda(operator.add, other, self)

    def __sub__(self, other: Any) -> MetricsLambda:
        return MetricsLambda(operator.sub, self, other)

    def __rsub__(self, other: Any) -> MetricsLambda:
        return MetricsLambda(operator.sub, other, self)

    def __mul__(self, other: Any) -> MetricsLambda:
        return MetricsLambda(operator.mul, self, other)

    def __rmul__(self, other: Any) -> MetricsLambda:
        return MetricsLambda(operator.mul, other, self)

    def __truediv__(self, other: Any) -> MetricsLambda:
        return MetricsLambda(operator.truediv, self, other)

    def __rtruediv__(self, other: Any) -> MetricsLambda:
        return MetricsLambda(operator.truediv, other, self)

    def __floordiv__(self, other: Any) -> MetricsLambda:
        return MetricsLambda(operator.floordiv, self, other)

    def __mod__(self, other: Any) -> MetricsLambda:
        return MetricsLambda(operator.mod, self, other)

    def __pow__(self, other: Any) -> MetricsLambda:
        return MetricsLambda(operator.pow, self, other)

    def __rpow__(self, other: Any) -> MetricsLambda:
        return MetricsLambda(operator.pow, other, self)

    def __neg__(self) -> MetricsLambda:
        return MetricsLambda(operator.neg, self)

    def __getitem__(self, index: Any) -> MetricsLambda:
        return MetricsLambda(operator.itemgetter(index), self)

    def __iter__(self) -> Iterator[Any]:
        # __getitem__ alone would make Python iterate a metric forever, building MetricsLambda(m[0]), m[1], ...
        raise TypeError(f"{type(self).__name__} is not iterable; index its value with metric[i] instead.")


# Ignite's Metric turns any attribute it does not have into the MetricsLambda calling that tensor method on its value
# (`precision.mean()`, `cm.diag()`, `iou.to(torch.double)`); here, these tensor methods, by name, and no other
TENSOR_METHODS = (
    "abs", "argmax", "argmin", "clamp", "cpu", "diag", "double", "exp", "flatten", "float", "item", "log", "max",
    "mean", "min", "norm", "prod", "reshape", "sqrt", "squeeze", "std", "sum", "t", "to", "tolist", "trace",
    "unsqueeze", "var", "view",
)  # fmt: skip


def _tensor_method(name: str) -> Callable[..., MetricsLambda]:
    def method(self: Metric, *args: Any, **kwargs: Any) -> MetricsLambda:
        return MetricsLambda(lambda value, *a, **k: getattr(value, name)(*a, **k), self, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"The MetricsLambda of this metric's value `.{name}(...)` (Ignite's tensor-method arithmetic)."
    return method


def _resumes_where_it_stopped(engine: Engine) -> bool:
    """Whether the event being fired starts where a run stopped: the STARTED of a run resumed from a state
    (iteration > 0), or the EPOCH_STARTED of an epoch resumed in its middle."""
    state, event = engine.state, engine.last_event_name
    if event == Events.STARTED:
        return state.iteration > 0
    if event == Events.EPOCH_STARTED and state.epoch_length:
        return state.iteration > (state.epoch - 1) * state.epoch_length
    return False


def _saved(value: Any, where: str) -> Any:
    """`value` as a metric's state keeps it: tensors copied (the metric goes on adding to its own in place), other
    metrics as their own state, containers walked."""
    if isinstance(value, Metric):
        return value._state_dict_per_rank()
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, _STATE_LEAVES):
        return value
    if isinstance(value, Mapping):
        return {key: _saved(item, f"{where}[{key!r}]") for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_saved(item, f"{where}[{i}]") for i, item in enumerate(value))
    raise TypeError(
        f"Found attribute of unsupported type. Currently, supported types include numeric types, tensor, Metric or "
        f"sequence/mapping of metrics: {where} is a {type(value).__name__}."
    )


def _loaded(current: Any, saved: Any, device: torch.device, where: str) -> Any:
    """The value to hold for `saved` where the metric holds `current`: a metric loads its own state; tensors go to
    the metric's device."""
    if isinstance(current, Metric):
        current._load_state_dict_per_rank(saved)
        return current
    if isinstance(current, (list, tuple)) and any(isinstance(item, Metric) for item in current):
        if not (isinstance(saved, (list, tuple)) and len(saved) == len(current)):
            raise ValueError(f"{where}: the saved state holds {saved!r} where {len(current)} values are expected.")
        return type(current)(_loaded(c, v, device, f"{where}[{i}]") for i, (c, v) in enumerate(zip(current, saved)))
    if isinstance(current, Mapping) and any(isinstance(item, Metric) for item in current.values()):
        if not (isinstance(saved, Mapping) and saved.keys() == current.keys()):
            raise ValueError(f"{where}: the saved state holds {saved!r} where the keys {list(current)} are expected.")
        return {key: _loaded(current[key], saved[key], device, f"{where}[{key!r}]") for key in current}
    if isinstance(saved, torch.Tensor):
        return saved.to(device)
    return saved


# -------------------------------------------------------------------------------------------------- composition
class MetricsLambda(Metric):
    """`f` applied to the computed values of other metrics (and plain values): `MetricsLambda(f, m1, m2, 3)`.

    Arithmetic on metrics builds one: `precision = true_positives / predicted_positives`. Resetting or updating
    it resets or updates each metric it depends on once (a metric used twice is not updated twice); attaching
    it attaches those metrics' reset and update handlers, and computing it computes each of them once.
    Attached, its `update()` is refused: the engine updates the dependencies.
    """

    required_output_keys = None
    _state_dict_all_req_keys = ("_updated", "args", "kwargs")

    def __init__(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        if not callable(f):
            raise TypeError(f"MetricsLambda: f must be callable, got {f!r}.")
        self.function = f
        self.engine: Engine | None = None
        self._updated = False
        # no dependencies yet while Metric.__init__ calls reset(): building a combination must not wipe what its
        # metrics accumulated (Ignite's does)
        self.args: list[Any] = []
        self.kwargs: dict[str, Any] = {}
        super().__init__(device="cpu")
        self.args = list(args)
        self.kwargs = kwargs

    def _nodes(self) -> list[Metric]:
        """Every metric this one depends on, nested MetricsLambdas included, each once, depth first."""
        seen: dict[int, Metric] = {}

        def visit(value: Any) -> None:
            if isinstance(value, Metric) and id(value) not in seen:
                seen[id(value)] = value
                if isinstance(value, MetricsLambda):
                    for child in (*value.args, *value.kwargs.values()):
                        visit(child)

        for value in (*self.args, *self.kwargs.values()):
            visit(value)
        return list(seen.values())

    def _leaves(self) -> list[Metric]:
        return [node for node in self._nodes() if not isinstance(node, MetricsLambda)]

    def reset(self) -> None:
        for metric in self._leaves():
            metric.reset()
        self._updated = False

    def update(self, output: Any) -> None:
        if self.engine is not None:
            raise ValueError(
                "This MetricsLambda is attached to an engine, which updates the metrics it depends on; do not call "
                "update() on it too (detach it first to use reset/update/compute by hand)."
            )
        for metric in self._leaves():
            metric.update(output)
        self._updated = True

    def compute(self) -> Any:
        return self._compute({})

    def _compute(self, computed: dict[int, Any]) -> Any:
        def value_of(arg: Any) -> Any:
            if not isinstance(arg, Metric):
                return arg
            if id(arg) not in computed:
                value = arg._compute(computed) if isinstance(arg, MetricsLambda) else arg.compute()
                computed[id(arg)] = value.cpu() if isinstance(value, torch.Tensor) else value
            return computed[id(arg)]

        args = [value_of(arg) for arg in self.args]
        kwargs = {key: value_of(arg) for key, arg in self.kwargs.items()}
        return self.function(*args, **kwargs)

    def attach(self, engine: Engine, name: str, usage: str | MetricUsage = EpochWise()) -> None:
        if self._updated:
            raise ValueError(
                "The metrics this MetricsLambda depends on were updated by hand; call reset() before attaching it "
                "to an engine."
            )
        if not isinstance(name, str):
            raise TypeError(f"MetricsLambda.attach: name must be a str, got {name!r}.")
        usage = as_usage(usage)
        for node in self._nodes():
            if isinstance(node, MetricsLambda):
                node.engine = engine
            else:
                if not engine.has_event_handler(node.started, usage.STARTED):
                    engine.add_event_handler(usage.STARTED, node.started)
                if not engine.has_event_handler(node.iteration_completed, usage.ITERATION_COMPLETED):
                    engine.add_event_handler(usage.ITERATION_COMPLETED, node.iteration_completed)
        self.engine = engine
        engine.add_event_handler(usage.COMPLETED, self.completed, name)

    def detach(self, engine: Engine, usage: str | MetricUsage = EpochWise()) -> None:
        """Stop writing this metric's value; the metrics it depends on stay attached (they may be shared)."""
        super().detach(engine, usage)
        self.engine = None

    def is_attached(self, engine: Engine, usage: str | MetricUsage = EpochWise()) -> bool:
        """Attached when its own value is written and every metric it depends on is reset and updated."""
        usage = as_usage(usage)
        return super().is_attached(engine, usage) and all(
            engine.has_event_handler(leaf.started, usage.STARTED)
            and engine.has_event_handler(leaf.iteration_completed, usage.ITERATION_COMPLETED)
            for leaf in self._leaves()
        )


for _name in TENSOR_METHODS:
    setattr(Metric, _name, _tensor_method(_name))
