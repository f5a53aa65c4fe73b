"""Ignite's logger API, independent of the tracker (`ignite.handlers.base_logger`): a `BaseLogger` is attached to
engine events with handlers that pick what to log (`OutputHandler`: metrics, the output, state attributes;
`OptimizerParamsHandler`: a parameter of each param group; `WeightsScalarHandler` / `GradsScalarHandler`: a
reduction of each parameter or its gradient; `WeightsHistHandler` / `GradsHistHandler`: histograms).

The loggers themselves are faces over tracktrain's loggers (`tracktrain_integrations.ignite_loggers`: the same
runs, the same delivery that outlives a tracker outage), reached from Ignite's module paths
`tracktrain.handlers.tensorboard_logger`, `.mlflow_logger` and `.wandb_logger`. A handler here hands the logger a
flat `{name: value}` of one event with `logger.write_scalars(values, step)`; values stay tensors until then (the
logger reads them back in one transfer), names are joined the way the tracker's Ignite logger joins them
(`logger.key(parts)`: "tag/name" for TensorBoard and W&B, "tag name" for MLflow).
"""

from __future__ import annotations

import numbers
import warnings
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from tracktrain.engine.engine import Engine
from tracktrain.engine.events import EventsList, RemovableEventHandle

__all__ = [
    "BaseHandler",
    "BaseLogger",
    "BaseOptimizerParamsHandler",
    "BaseOutputHandler",
    "BaseWeightsHandler",
    "BaseWeightsScalarHandler",
    "GradsHistHandler",
    "GradsScalarHandler",
    "OptimizerParamsHandler",
    "OutputHandler",
    "WeightsHistHandler",
    "WeightsScalarHandler",
]


class BaseLogger(ABC):
    """A tracker's logger for the Engine, Ignite's way: `attach(engine, handler, event)` calls
    `handler(engine, logger, event)` when `event` fires; `close()` (or leaving a `with` block) ends the run.

    Subclasses write what the handlers give them (`write_scalars`) and say how a name's parts are joined (`key`).
    """

    histograms = False  # whether the tracker takes histograms (`writer.add_histogram`): TensorBoard only
    steps_only_grow = False  # whether a value at a step older than one logged is dropped (W&B)

    def attach(
        self, engine: Engine, log_handler: Callable, event_name: Any, *args: Any, **kwargs: Any
    ) -> RemovableEventHandle:
        """Call `log_handler(engine, self, event_name)` on `event_name` (an event, a filtered event or an
        `EventsList`) of `engine`."""
        if not isinstance(engine, Engine):
            raise TypeError(f"{type(self).__name__}.attach needs an Engine, got {type(engine).__name__}.")
        if not callable(log_handler):
            raise TypeError(f"{type(self).__name__}.attach: log_handler must be callable, got {log_handler!r}.")
        events = list(event_name) if isinstance(event_name, EventsList) else [event_name]
        for event in events:
            if event not in engine.state.event_to_attr:
                raise RuntimeError(
                    f"Unknown event name '{event}': {type(self).__name__} logs at the step of an event with a "
                    "counter (Events.ITERATION_COMPLETED, EPOCH_COMPLETED, ...); register a custom event with "
                    "event_to_attr first."
                )
        if isinstance(event_name, EventsList):
            for event in events:
                engine.add_event_handler(event, log_handler, self, event)
            return RemovableEventHandle(event_name, log_handler, engine)
        return engine.add_event_handler(event_name, log_handler, self, event_name, *args, **kwargs)

    def attach_output_handler(self, engine: Engine, event_name: Any, *args: Any, **kwargs: Any) -> RemovableEventHandle:
        """Attach this tracker's `OutputHandler(*args, **kwargs)` (tag, metric_names, output_transform,
        global_step_transform, state_attributes) on `event_name`."""
        return self.attach(engine, self._create_output_handler(*args, **kwargs), event_name=event_name)

    def attach_opt_params_handler(
        self, engine: Engine, event_name: Any, *args: Any, **kwargs: Any
    ) -> RemovableEventHandle:
        """Attach this tracker's `OptimizerParamsHandler(optimizer, param_name="lr", tag=None)` on `event_name`."""
        return self.attach(engine, self._create_opt_params_handler(*args, **kwargs), event_name=event_name)

    def _create_output_handler(self, *args: Any, **kwargs: Any) -> BaseHandler:
        return OutputHandler(*args, **kwargs)

    def _create_opt_params_handler(self, *args: Any, **kwargs: Any) -> BaseHandler:
        return OptimizerParamsHandler(*args, **kwargs)

    @abstractmethod
    def write_scalars(self, values: Mapping[str, Any], step: int) -> None:
        """Log `values` (numbers, 0-dim tensors and, where the tracker takes text, strings) at `step`."""

    def key(self, parts: Sequence[str]) -> str:
        """A logged name from its parts (the handler's tag, the metric's name, ...): joined by "/"."""
        return "/".join(parts)

    def __enter__(self) -> BaseLogger:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def close(self) -> None:
        """End the run (delivering what is queued)."""


class BaseHandler(ABC):
    """What a BaseLogger calls: `handler(engine, logger, event_name)`."""

    @abstractmethod
    def __call__(self, engine: Engine, logger: Any, event_name: Any) -> None: ...


def _default_global_step(engine: Engine, event_name: Any) -> int:
    return engine.state.get_event_attrib_value(event_name)


def _checked_step(step: Any) -> int:
    if isinstance(step, bool) or not isinstance(step, int):
        raise TypeError(
            f"global_step must be int, got {type(step)}. Please check the output of global_step_transform "
            f"(it returned {step!r})."
        )
    return step


def _checked_logger(handler: BaseHandler, logger: Any, histograms: bool = False) -> BaseLogger:
    if not isinstance(logger, BaseLogger) or (histograms and not logger.histograms):
        which = (
            "TensorboardLogger" if histograms else "a tracker's logger (TensorboardLogger, MLflowLogger, WandBLogger)"
        )
        raise TypeError(f"Handler '{type(handler).__name__}' works only with {which}, got {type(logger).__name__}.")
    return logger


class BaseOutputHandler(BaseHandler):
    """Picks the values of one event: `metric_names` of `engine.state.metrics` (a list, or "all"), the dict (or
    value, logged as "output") `output_transform(engine.state.output)` returns, and `state_attributes` of the
    state; each named `tag/...`, nested dicts and sequences flattened into `tag/name/key`."""

    def __init__(
        self,
        tag: str,
        metric_names: str | list[str] | None = None,
        output_transform: Callable | None = None,
        global_step_transform: Callable[[Engine, Any], int] | None = None,
        state_attributes: list[str] | None = None,
    ) -> None:
        if metric_names is not None and not (isinstance(metric_names, list) or metric_names == "all"):
            raise TypeError(
                f"metric_names should be either a list or equal 'all', got {type(metric_names)} instead "
                f"({metric_names!r})."
            )
        if output_transform is not None and not callable(output_transform):
            raise TypeError(f"output_transform should be a function, got {type(output_transform)} instead.")
        if output_transform is None and metric_names is None and state_attributes is None:
            raise ValueError("Either metric_names, output_transform or state_attributes should be defined")
        if global_step_transform is not None and not callable(global_step_transform):
            raise TypeError(f"global_step_transform should be a function, got {type(global_step_transform)} instead.")
        if state_attributes is not None and not isinstance(state_attributes, list):
            raise TypeError(f"state_attributes should be a list of State attribute names, got {state_attributes!r}.")
        self.tag = tag
        self.metric_names = metric_names
        self.output_transform = output_transform
        self.global_step_transform = global_step_transform or _default_global_step
        self.state_attributes = state_attributes

    def _values(self, engine: Engine, text: bool) -> dict[tuple[str, ...], Any]:
        """The event's values by the parts of their names (tag first); strings only with `text`."""
        picked: OrderedDict[str, Any] = OrderedDict()
        metrics = engine.state.metrics
        if self.metric_names == "all":
            picked.update(metrics)
        elif self.metric_names is not None:
            for name in self.metric_names:
                if name not in metrics:
                    warnings.warn(
                        f"Provided metric name '{name}' is missing in engine's state metrics: {list(metrics)}",
                        stacklevel=3,
                    )
                    continue
                picked[name] = metrics[name]
        if self.output_transform is not None:
            output = self.output_transform(engine.state.output)
            picked.update(output if isinstance(output, dict) else {"output": output})
        if self.state_attributes is not None:
            picked.update({name: getattr(engine.state, name, None) for name in self.state_attributes})
        flat: dict[tuple[str, ...], Any] = {}
        _flatten(picked, (self.tag,), flat, text)
        return flat


def _flatten(values: Mapping[str, Any], parents: tuple[str, ...], out: dict[tuple[str, ...], Any], text: bool) -> None:
    for name, value in values.items():
        parts = (*parents, str(name))
        if isinstance(value, Mapping):
            _flatten(value, parts, out, text)
        elif isinstance(value, Sequence) and not isinstance(value, str):
            _flatten({str(i): item for i, item in enumerate(value)}, parts, out, text)
        elif isinstance(value, torch.Tensor) and value.ndim == 1:
            _flatten({str(i): item for i, item in enumerate(value)}, parts, out, text)
        elif isinstance(value, numbers.Number) or (isinstance(value, torch.Tensor) and value.ndim == 0):
            out[parts] = value  # a tensor stays one until the logger reads every value back at once
        elif isinstance(value, str) and text:
            out[parts] = value
        else:
            warnings.warn(
                f"Logger output_handler can not log metrics value type {type(value)} ({'/'.join(parts)} is not "
                "logged: log numbers, 0-dim or 1-dim tensors, or dicts and lists of them)",
                stacklevel=4,
            )


class OutputHandler(BaseOutputHandler):
    """Logs the picked values (see `BaseOutputHandler`) at `global_step_transform(engine, event_name)` (default:
    the event's counter; `global_step_from_engine(trainer)` for an evaluator's values on the trainer's axis)."""

    log_text = False

    def __call__(self, engine: Engine, logger: Any, event_name: Any) -> None:
        tracker = _checked_logger(self, logger)
        step = _checked_step(self.global_step_transform(engine, event_name))
        values = self._values(engine, text=self.log_text)
        tracker.write_scalars({tracker.key(parts): value for parts, value in values.items()}, step)


class BaseOptimizerParamsHandler(BaseHandler):
    """Logs `param_name` of each of the optimizer's param groups, as `tag/param_name/group_i`."""

    def __init__(self, optimizer: Optimizer, param_name: str = "lr", tag: str | None = None) -> None:
        if not (
            isinstance(optimizer, Optimizer)
            or (hasattr(optimizer, "param_groups") and isinstance(optimizer.param_groups, Sequence))
        ):
            raise TypeError(
                "Argument optimizer should be torch.optim.Optimizer or has attribute 'param_groups' as list/tuple, "
                f"but given {type(optimizer)}."
            )
        self.optimizer = optimizer
        self.param_name = param_name
        self.tag = tag


class OptimizerParamsHandler(BaseOptimizerParamsHandler):
    __doc__ = BaseOptimizerParamsHandler.__doc__

    def __call__(self, engine: Engine, logger: Any, event_name: Any) -> None:
        tracker = _checked_logger(self, logger)
        step = engine.state.get_event_attrib_value(event_name)
        prefix = (self.tag,) if self.tag else ()
        values = {
            tracker.key((*prefix, self.param_name, f"group_{i}")): float(group[self.param_name])
            for i, group in enumerate(self.optimizer.param_groups)
        }
        tracker.write_scalars(values, step)


class BaseWeightsHandler(BaseHandler):
    """A handler of the model's parameters: all of them, those whose names start with one of `whitelist`, or those
    for which `whitelist(name, parameter)` is true."""

    def __init__(
        self,
        model: nn.Module,
        tag: str | None = None,
        whitelist: list[str] | Callable[[str, nn.Parameter], bool] | None = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"Argument model should be of type torch.nn.Module, but given {type(model)}")
        self.model = model
        self.tag = tag
        named = list(model.named_parameters())
        if whitelist is None:
            chosen = named
        elif callable(whitelist):
            chosen = [(name, p) for name, p in named if whitelist(name, p)]
        else:
            prefixes = tuple(whitelist)
            chosen = [(name, p) for name, p in named if name.startswith(prefixes)]
        self.weights = tuple(chosen)

    def _prefix(self) -> str:
        return f"{self.tag}/" if self.tag else ""


class BaseWeightsScalarHandler(BaseWeightsHandler):
    """Logs `reduction(parameter)` (default the norm) of each chosen parameter."""

    def __init__(
        self,
        model: nn.Module,
        reduction: Callable[[torch.Tensor], float | torch.Tensor] = torch.norm,
        tag: str | None = None,
        whitelist: list[str] | Callable[[str, nn.Parameter], bool] | None = None,
    ) -> None:
        super().__init__(model, tag=tag, whitelist=whitelist)
        if not callable(reduction):
            raise TypeError(f"Argument reduction should be callable, but given {type(reduction)}")
        probe = reduction(torch.ones(4, 2))
        if not (isinstance(probe, numbers.Number) or (isinstance(probe, torch.Tensor) and probe.ndim == 0)):
            raise TypeError(f"Output of the reduction function should be a scalar, but got {type(probe)}")
        self.reduction = reduction

    def _log(self, engine: Engine, logger: Any, event_name: Any, kind: str, of_grads: bool) -> None:
        tracker = _checked_logger(self, logger)
        step = engine.state.get_event_attrib_value(event_name)
        name = getattr(self.reduction, "__name__", "reduction")
        values = {}
        for parameter_name, parameter in self.weights:
            tensor = parameter.grad if of_grads else parameter.data
            if tensor is None:
                continue
            values[f"{self._prefix()}{kind}_{name}/{parameter_name.replace('.', '/')}"] = self.reduction(tensor)
        tracker.write_scalars(values, step)


class WeightsScalarHandler(BaseWeightsScalarHandler):
    """Logs `reduction` of each parameter as `tag/weights_<reduction>/<name>`."""

    def __call__(self, engine: Engine, logger: Any, event_name: Any) -> None:
        self._log(engine, logger, event_name, "weights", of_grads=False)


class GradsScalarHandler(BaseWeightsScalarHandler):
    """Logs `reduction` of each parameter's gradient as `tag/grads_<reduction>/<name>` (parameters without a
    gradient are left out)."""

    def __call__(self, engine: Engine, logger: Any, event_name: Any) -> None:
        self._log(engine, logger, event_name, "grads", of_grads=True)


class _HistHandler(BaseWeightsHandler):
    of_grads = False
    kind = "weights"

    def __call__(self, engine: Engine, logger: Any, event_name: Any) -> None:
        tracker = _checked_logger(self, logger, histograms=True)
        step = engine.state.get_event_attrib_value(event_name)
        writer = getattr(tracker, "writer")  # noqa: B009 - the TensorBoard face's SummaryWriter
        for name, parameter in self.weights:
            tensor = parameter.grad if self.of_grads else parameter.data
            if tensor is None:
                continue
            writer.add_histogram(
                tag=f"{self._prefix()}{self.kind}/{name.replace('.', '/')}",
                values=tensor.detach().cpu().numpy(),
                global_step=step,
            )


class WeightsHistHandler(_HistHandler):
    """A histogram of each parameter, `tag/weights/<name>` (TensorboardLogger only)."""


class GradsHistHandler(_HistHandler):
    """A histogram of each parameter's gradient, `tag/grads/<name>` (TensorboardLogger only)."""

    of_grads = True
    kind = "grads"
