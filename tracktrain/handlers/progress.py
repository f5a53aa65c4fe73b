"""`ProgressBar`: a tqdm bar per epoch with metrics and the output in its postfix (Ignite's ProgressBar)."""

from __future__ import annotations

import inspect
import numbers
import sys
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from tracktrain.engine.engine import Engine
from tracktrain.engine.events import CallableEventWithFilter, Events

__all__ = ["ProgressBar", "place_in_period"]

_DEFAULT_BAR_FORMAT = "{desc}[{n_fmt}/{total_fmt}] {percentage:3.0f}%|{bar}{postfix} [{elapsed}<{remaining}]"

# The events a bar can advance or close on, in the order they fire within a run.
_EVENTS_ORDER = ("STARTED", "EPOCH_STARTED", "ITERATION_STARTED", "ITERATION_COMPLETED", "EPOCH_COMPLETED", "COMPLETED")
# The event that starts the period a closing event ends: a bar still open then is left over from a cut-short one.
_OPENING_EVENT = {
    "ITERATION_COMPLETED": Events.ITERATION_STARTED,
    "EPOCH_COMPLETED": Events.EPOCH_STARTED,
    "COMPLETED": Events.STARTED,
}
# tqdm arguments ProgressBar sets itself.
_OWN_TQDM_ARGS = {"total": "", "initial": "", "iterable": "", "leave": " (use persist=True/False)"}


class ProgressBar:
    """A tqdm progress bar for an Engine: one bar per epoch, with metrics and output values after it.

    Args:
        persist: keep each finished bar on screen instead of clearing it.
        bar_format: tqdm's `bar_format`; None for tqdm's default. The default shows
            `Epoch [2/5]: [30/100]  30%|███       , loss=0.123 [00:03<00:07]`.
        tqdm_kwargs: passed to tqdm (`file`, `desc`, `mininterval`, `ncols`, `position`, `disable`, ...).

    By default a bar is only drawn on a terminal: tqdm's `disable=None` turns the bar off when the target
    stream (`file`, default `sys.stderr`) is not a TTY, so logs piped to a file get no bar lines. Pass
    `disable=False` to draw anyway, or `disable=True` to never draw. `log_message` always writes.

    Values are read only when the bar is redrawn: tqdm redraws at most every `mininterval` seconds (0.1 by
    default) and every `miniters` updates, and the postfix is refreshed only on updates where tqdm will
    redraw (and once more when the bar closes). Reading a tensor value (`.item()`) waits for the device, so
    this keeps the host-device syncs of the bar at about ten a second, whatever the iteration rate, and at
    none when the bar is disabled.

    .. code-block:: python

        pbar = ProgressBar(persist=True)
        pbar.attach(trainer, metric_names=["loss"], output_transform=lambda out: {"batch_loss": out})
        # inside handlers, print through the bar so it is not broken up:
        pbar.log_message(f"validation accuracy: {acc:.3f}")
    """

    def __init__(self, persist: bool = False, bar_format: str | None = _DEFAULT_BAR_FORMAT, **tqdm_kwargs: Any) -> None:
        from tqdm.auto import tqdm  # the notebook widget under Jupyter, the text bar elsewhere
        from tqdm.std import tqdm as std_tqdm

        for name, hint in _OWN_TQDM_ARGS.items():
            if name in tqdm_kwargs:
                raise TypeError(f"ProgressBar sets tqdm's {name}= itself; remove {name}={tqdm_kwargs[name]!r}{hint}.")
        known = set(inspect.signature(std_tqdm.__init__).parameters) - {"self", "kwargs"}
        unknown = sorted(set(tqdm_kwargs) - known)
        if unknown:
            raise TypeError(f"ProgressBar got unknown tqdm argument(s) {unknown}; tqdm accepts {sorted(known)}.")
        if bar_format is not None and not isinstance(bar_format, str):
            raise TypeError(f"bar_format must be a tqdm format string or None, got {bar_format!r}.")

        self._tqdm_cls = tqdm
        self.pbar: Any = None
        self.persist = bool(persist)
        self.bar_format = bar_format
        self.tqdm_kwargs = tqdm_kwargs

    def log_message(self, message: str) -> None:
        """Print `message` above the bar (tqdm.write), to the bar's `file` or else stdout, without breaking it."""
        self._tqdm_cls.write(message, file=self.tqdm_kwargs.get("file"))

    def attach(
        self,
        engine: Engine,
        metric_names: str | Sequence[str] | None = None,
        output_transform: Callable[[Any], Any] | None = None,
        event_name: CallableEventWithFilter = Events.ITERATION_COMPLETED,
        closing_event_name: CallableEventWithFilter = Events.EPOCH_COMPLETED,
        state_attributes: Sequence[str] | None = None,
    ) -> None:
        """Show a bar for `engine` that advances on `event_name` and is closed on `closing_event_name`.

        Args:
            engine: the engine to follow.
            metric_names: names in `engine.state.metrics` to show, or "all".
            output_transform: picks what to show from `engine.state.output`: a dict `{name: value}`, or a
                single value shown as `output`.
            event_name: the event that advances the bar; may be filtered (`ITERATION_COMPLETED(every=10)`).
            closing_event_name: the (unfiltered) event that ends a bar; a new one starts with the next event.
            state_attributes: attributes of `engine.state` to show.

        Values may be numbers, strings, 0-d and 1-d tensors, and dicts or sequences of them; a 1-d tensor or a
        sequence shows as `name_0, name_1, ...` and a nested dict as `outer_inner`.
        """
        if not isinstance(engine, Engine):
            raise TypeError(f"ProgressBar.attach needs an Engine, got {engine!r} of type {type(engine).__name__}.")
        if metric_names is not None and metric_names != "all":
            if isinstance(metric_names, str) or not (
                isinstance(metric_names, Sequence) and all(isinstance(name, str) for name in metric_names)
            ):
                raise TypeError(f"metric_names should be a list of metric names or 'all', got {metric_names!r}.")
        if output_transform is not None and not callable(output_transform):
            raise TypeError(f"output_transform should be a function of the engine's output, got {output_transform!r}.")
        if state_attributes is not None and (
            isinstance(state_attributes, str)
            or not (isinstance(state_attributes, Sequence) and all(isinstance(a, str) for a in state_attributes))
        ):
            raise TypeError(
                f"state_attributes should be a list of engine.state attribute names, got {state_attributes!r}."
            )
        for role, event in (("event_name", event_name), ("closing_event_name", closing_event_name)):
            if not (isinstance(event, CallableEventWithFilter) and event.name in _EVENTS_ORDER):
                raise ValueError(
                    f"{role}={event!r} is not an event a ProgressBar can follow; use one of "
                    f"{', '.join('Events.' + name for name in _EVENTS_ORDER)}."
                )
        if closing_event_name.filter is not None:
            raise ValueError(
                f"closing_event_name={closing_event_name!r} should not be filtered: a bar must close at the end "
                f"of every period. Pass Events.{closing_event_name.name}."
            )
        if _EVENTS_ORDER.index(event_name.name) >= _EVENTS_ORDER.index(closing_event_name.name):
            raise ValueError(
                f"Logging event {event_name!r} should be called before closing event {closing_event_name!r}."
            )

        driver = _BarDriver(self, event_name, closing_event_name, metric_names, output_transform, state_attributes)
        # Leftover bars (a period cut short by terminate/interrupt/an exception) are closed before the driver
        # runs on the opening event, so it never advances a stale bar.
        cleanup = {
            Events.STARTED,
            _OPENING_EVENT[closing_event_name.name],
            Events.TERMINATE,
            Events.INTERRUPT,
            Events.COMPLETED,
        }
        cleanup.discard(closing_event_name)
        for event in sorted(cleanup, key=lambda e: e.name):
            engine.add_event_handler(event, self.close)
        engine.add_event_handler(event_name, driver)
        engine.add_event_handler(closing_event_name, driver.finish)

    def close(self) -> None:
        """Close the current bar, if any (cleared unless `persist`). Called on TERMINATE, INTERRUPT and at the
        start of the next run; call it (or use `with ProgressBar() as pbar:`) after a run that raised."""
        if self.pbar is not None:
            bar, self.pbar = self.pbar, None
            bar.close()

    def draws(self) -> bool:
        """Whether this bar will be drawn: `disable` when it was given, else whether its stream (`file`, default
        `sys.stderr` now) is a terminal. tqdm's own `disable=None` rule, decided here once, for the bars this
        opens and for faces that show something else where no bar is drawn (the Trainer's plain lines)."""
        disable = self.tqdm_kwargs.get("disable")
        if disable is not None:
            return not disable
        stream = self.tqdm_kwargs.get("file") or sys.stderr
        return bool(getattr(stream, "isatty", lambda: False)())

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _open(self, total: int | None, initial: int, desc: str) -> Any:
        # tqdm's set_description adds the ": " that its constructor does not
        kwargs = {**self.tqdm_kwargs, "disable": not self.draws(), "desc": f"{desc}: "}
        self.pbar = self._tqdm_cls(
            total=total, initial=initial, leave=self.persist, bar_format=self.bar_format, **kwargs
        )
        return self.pbar


class _BarDriver:
    """What one `attach` shows: advances the bar on its event and fills the postfix when the bar redraws."""

    def __init__(
        self,
        progress: ProgressBar,
        event: CallableEventWithFilter,
        closing_event: CallableEventWithFilter,
        metric_names: str | Sequence[str] | None,
        output_transform: Callable[[Any], Any] | None,
        state_attributes: Sequence[str] | None,
    ) -> None:
        self.progress = progress
        self.event = event
        self.closing_event = closing_event
        self.metric_names: str | list[str] | None = (
            metric_names if metric_names is None or metric_names == "all" else list(metric_names)
        )
        self.output_transform = output_transform
        self.state_attributes = None if state_attributes is None else list(state_attributes)
        self.shows_values = bool(metric_names or output_transform is not None or state_attributes)
        # decided once, not at every event: the state attribute that says how often the event fires per bar
        self._period = _PERIOD_OF.get(event.name)
        self._counter: str | None = None  # the state counter of the event, looked up on the first call

    def __call__(self, engine: Engine) -> None:
        state = engine.state
        period = self._period
        total = getattr(state, period) if period is not None else 1
        if self._counter is None:
            state.get_event_attrib_value(self.event)  # an event without a counter: its error, once
            self._counter = state.event_to_attr[self.event]
        step = place_in_period(getattr(state, self._counter), total)
        bar = self.progress.pbar
        if bar is None:
            bar = self.progress._open(total, step, self._description(engine))
            if self.shows_values and not bar.disable:
                bar.set_postfix(self._values(engine), refresh=True)
            return
        if bar.disable:
            return
        if self.shows_values and _will_redraw(bar, step):
            bar.set_postfix(self._values(engine), refresh=False)  # drawn by the update below
        bar.update(step - bar.n)

    def finish(self, engine: Engine) -> None:
        """The period is over: show the final values and the full count, then close the bar."""
        bar = self.progress.pbar
        if bar is None:
            return
        if not bar.disable:
            if self.shows_values:
                bar.set_postfix(self._values(engine), refresh=False)
            if bar.total is not None:
                bar.n = bar.total  # a filtered event (every=n) may stop short of the last step
        self.progress.close()

    def _description(self, engine: Engine) -> str:
        desc = self.progress.tqdm_kwargs.get("desc") or ("Iteration" if engine.state.max_epochs == 1 else "Epoch")
        bars_per_run = _events_per_bar(self.closing_event, engine)
        if bars_per_run and bars_per_run > 1:
            desc += f" [{engine.state.get_event_attrib_value(self.closing_event)}/{bars_per_run}]"
        return desc

    def _values(self, engine: Engine) -> OrderedDict[str, Any]:
        """The postfix: chosen metrics, then the transformed output, then state attributes, flattened."""
        state = engine.state
        chosen: OrderedDict[str, Any] = OrderedDict()
        if self.metric_names == "all":
            chosen.update(state.metrics)
        elif self.metric_names is not None:
            for name in self.metric_names:
                if name not in state.metrics:
                    warnings.warn(
                        f"Provided metric name '{name}' is missing in engine's state metrics: {list(state.metrics)}",
                        stacklevel=2,
                    )
                    continue
                chosen[name] = state.metrics[name]
        if self.output_transform is not None:
            output = self.output_transform(state.output)
            chosen.update(output if isinstance(output, dict) else {"output": output})
        if self.state_attributes is not None:
            chosen.update((name, getattr(state, name, None)) for name in self.state_attributes)
        flat: OrderedDict[str, Any] = OrderedDict()
        for name, value in chosen.items():
            _flatten(str(name), value, flat)
        return flat


_PERIOD_OF = {  # the state attribute counting an event's firings per bar (other events: once)
    "ITERATION_STARTED": "epoch_length",
    "ITERATION_COMPLETED": "epoch_length",
    "EPOCH_STARTED": "max_epochs",
    "EPOCH_COMPLETED": "max_epochs",
}


def place_in_period(count: int, period: int | None) -> int:
    """Where the `count`-th firing of an event (1-based, counted over the run) falls within its period: the step
    within the epoch for iterations (`period=epoch_length`), also when a run resumed mid-epoch; `count` itself when
    the period is not known (yet)."""
    return count if period is None else (count - 1) % period + 1


def _events_per_bar(event: CallableEventWithFilter, engine: Engine) -> int | None:
    """How many times `event` fires in one bar's period: iterations per epoch, epochs per run, or once."""
    period = _PERIOD_OF.get(event.name)
    return getattr(engine.state, period) if period is not None else 1


def _will_redraw(bar: Any, n: int) -> bool:
    """Whether tqdm's `update()` to count `n` will redraw the bar: the same two tests tqdm makes (at least
    `miniters` updates and `mininterval` seconds since the last draw), so values are read only for a draw."""
    if n - bar.last_print_n < bar.miniters:
        return False
    now = time.time()  # tqdm's clock
    return now - bar.last_print_t >= bar.mininterval and now >= bar.start_t + bar.delay


def _flatten(name: str, value: Any, out: OrderedDict[str, Any]) -> None:
    """Add `value` under `name` as values tqdm can show; reading a tensor here waits for its device."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            _flatten(f"{name}_{key}", item, out)
    elif isinstance(value, torch.Tensor) and value.ndim <= 1:
        items = value.tolist()  # sync point, only when the bar redraws
        if value.ndim == 0:
            out[name] = items
        else:
            for index, item in enumerate(items):
                out[f"{name}_{index}"] = item
    elif isinstance(value, (numbers.Number, str)):
        out[name] = value
    elif isinstance(value, Sequence):
        for index, item in enumerate(value):
            _flatten(f"{name}_{index}", item, out)
    else:
        warnings.warn(
            f"ProgressBar can not show '{name}' of type {type(value).__name__}; give it numbers, strings, "
            "0-d or 1-d tensors, or dicts/lists of them.",
            stacklevel=3,
        )
