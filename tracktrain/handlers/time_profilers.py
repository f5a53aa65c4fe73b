"""Ignite's time profilers of an Engine (`ignite.handlers.time_profilers`): how long the process function, the data
loading and the handlers of each event take, per iteration and epoch (`BasicTimeProfiler`), or per handler
(`HandlersTimeProfiler`).

One recorder under both: at `attach` (and again as the run starts, for the handlers attached since) every handler of
the engine is wrapped, through `Engine.wrap_event_handlers`, in a `StopWatch` (`tracktrain.handlers.multi_timer`,
the watch of `Timer` and the Trainer's `Timing`) that records its duration and when each event's handlers began and
ended; the processing time of an iteration is the gap between the last handler of ITERATION_STARTED and the first of
ITERATION_COMPLETED, the data loading's from the first handler of GET_BATCH_STARTED to the last of
GET_BATCH_COMPLETED. The wrappers are removed when the run completes. Ignite inserts its own handlers at the head
and tail of the engine's private lists instead; here a STARTED handler attached after `attach()` is not timed.
"""

from __future__ import annotations

import functools
import os
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from time import perf_counter
from typing import Any, ClassVar

import torch

from tracktrain.engine.engine import Engine
from tracktrain.engine.events import Events

__all__ = ["BasicTimeProfiler", "HandlersTimeProfiler"]

# Ignite's Events in Ignite's order, without those it leaves out
_PROFILED: tuple[str, ...] = ("EPOCH_STARTED", "EPOCH_COMPLETED", "STARTED", "COMPLETED", "ITERATION_STARTED")
_PROFILED += ("ITERATION_COMPLETED", "GET_BATCH_STARTED", "GET_BATCH_COMPLETED")
_BY_EPOCH = {"EPOCH_STARTED", "EPOCH_COMPLETED"}
_ONCE = {"STARTED", "COMPLETED"}
_PROFILER_EVENTS = {name: getattr(Events, name) for name in _PROFILED}
# every event in the order of Ignite's Events (the order of HandlersTimeProfiler's rows); custom events after them
_ORDER: tuple[str, ...] = (*_PROFILED[:6], "EXCEPTION_RAISED", *_PROFILED[6:], "DATALOADER_STOP_ITERATION")
_ORDER += ("TERMINATE",)
_ORDER += ("TERMINATE_SINGLE_EPOCH", "INTERRUPT")


def _name_of(handler: Callable) -> str:
    return getattr(handler, "__qualname__", type(handler).__name__)


class _Recorder:
    """The timing wrappers of one engine: each handler's duration (`on_handler(event, name, index, seconds,
    internal)`: internal for the profiler's own handlers) and
    the first start and last end of each event's handlers at each firing."""

    def __init__(
        self, is_internal: Callable[[Callable], bool], on_handler: Callable[[str, str, int, float, bool], None]
    ) -> None:
        self.is_internal = is_internal
        self.on_handler = on_handler
        self.first_start: dict[tuple[str, int], float] = {}
        self.last_end: dict[tuple[str, int], float] = {}
        self.names: dict[str, list[str]] = {}  # each event's handlers (the profiler's own left out), in order
        self.recording = False
        self._unwrap: list[Callable[[], None]] = []

    def wrap(self, engine: Engine) -> None:
        self.recording = True
        self._unwrap.append(
            engine.wrap_event_handlers(lambda event, handler: self._timed(engine, event, handler), owner=self)
        )

    def unwrap(self) -> None:
        """Take the wrappers off (one that another profiler wrapped in turn stays, recording nothing)."""
        for unwrap in self._unwrap:
            unwrap()
        self._unwrap = []
        self.recording = False

    def _timed(self, engine: Engine, event: str, handler: Callable) -> Callable:
        internal, name = self.is_internal(handler), _name_of(handler)
        if not internal:
            self.names.setdefault(event, []).append(name)
        state = engine.state

        @functools.wraps(handler)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.recording:
                return handler(*args, **kwargs)
            index = state.epoch if event in _BY_EPOCH else 0 if event in _ONCE else state.iteration
            started = perf_counter()
            self.first_start.setdefault((event, index), started)
            try:
                return handler(*args, **kwargs)
            finally:
                ended = perf_counter()
                self.last_end[(event, index)] = ended
                self.on_handler(event, name, index, ended - started, internal)

        return timed

    def gap(self, first: tuple[str, int], then: tuple[str, int], from_start: bool = False) -> float:
        """Seconds from the end (or the start) of `first`'s handlers to the start (end) of `then`'s; 0 if either
        did not fire."""
        if from_start:
            begin, end = self.first_start.get(first), self.last_end.get(then)
        else:
            begin, end = self.last_end.get(first), self.first_start.get(then)
        return 0.0 if begin is None or end is None else end - begin


class _Profiler:
    """What both profilers share: the recorder, attached to STARTED, removed at COMPLETED."""

    def __init__(self) -> None:
        self._recorder = _Recorder(self._is_internal, self._on_handler)

    def _is_internal(self, handler: Callable) -> bool:
        """A handler of a profiler (this one or another: a profiler does not profile profilers)."""
        while hasattr(handler, "__wrapped__"):  # under another profiler's timing wrapper
            handler = handler.__wrapped__
        return isinstance(getattr(handler, "__self__", None), _Profiler)

    def _on_handler(self, event: str, name: str, index: int, seconds: float, internal: bool) -> None:
        raise NotImplementedError

    def attach(self, engine: Engine) -> None:
        """Profile `engine`'s next runs (its handlers attached so far, and those attached before the run starts)."""
        if not isinstance(engine, Engine):
            raise TypeError(f"Argument engine should be ignite.engine.Engine, but given {type(engine)}")
        if engine.has_event_handler(self._started, Events.STARTED):
            return
        for name, event in _PROFILER_EVENTS.items():
            if name != "STARTED":
                engine.add_event_handler(event, self._mark)  # every profiled event has a handler to time its span
        engine.add_event_handler(Events.STARTED, self._started)
        engine.add_event_handler(Events.COMPLETED, self._completed)
        self._recorder.wrap(engine)

    def _mark(self) -> None:
        """Nothing: its wrapper records when the event's handlers run."""

    def _started(self, engine: Engine) -> None:
        self._recorder.first_start.clear()
        self._recorder.last_end.clear()
        self._recorder.wrap(engine)  # the handlers attached since attach()
        self._reset(engine)

    def _reset(self, engine: Engine) -> None:
        raise NotImplementedError

    def _completed(self, engine: Engine) -> None:
        self._recorder.unwrap()

    def _processing_and_dataflow(self, iteration: int) -> tuple[float, float]:
        recorder = self._recorder
        processing = recorder.gap(("ITERATION_STARTED", iteration), ("ITERATION_COMPLETED", iteration))
        dataflow = recorder.gap(("GET_BATCH_STARTED", iteration), ("GET_BATCH_COMPLETED", iteration), from_start=True)
        return processing, dataflow


def _write_csv(output_path: str | os.PathLike, headers: Sequence[str], columns: Sequence[torch.Tensor]) -> None:
    try:
        import pandas as pd  # type: ignore[import-untyped]
    except ImportError as error:
        raise ModuleNotFoundError(f"Need pandas to write results as files ({error}): pip install pandas") from error
    table = torch.stack(list(columns), dim=1).numpy()
    pd.DataFrame(data=table, columns=list(headers)).to_csv(output_path, index=False)


class BasicTimeProfiler(_Profiler):
    """Per iteration: the process function's time and the data loading's; per event and iteration (or epoch): the
    time of all its handlers. `get_results()` summarizes them, `print_results(results)` prints the summary,
    `write_results(path)` writes every iteration's times as CSV (pandas)."""

    events_to_ignore: ClassVar[list[Any]] = [
        Events.EXCEPTION_RAISED,
        Events.TERMINATE,
        Events.TERMINATE_SINGLE_EPOCH,
        Events.DATALOADER_STOP_ITERATION,
        Events.INTERRUPT,
    ]

    def __init__(self) -> None:
        super().__init__()
        self.dataflow_times = torch.zeros(1)
        self.processing_times = torch.zeros(1)
        self.event_handlers_times: dict[Any, torch.Tensor] = {}
        self.max_epochs = 0
        self.total_num_iters = 0

    def _reset(self, engine: Engine) -> None:
        state = engine.state
        length = len(state.dataloader) if hasattr(state.dataloader, "__len__") else state.epoch_length  # type: ignore[arg-type]
        if length is None:
            raise ValueError(
                "As epoch_length is not set, we can not use BasicTimeProfiler in this case.Please, set "
                "trainer.run(..., epoch_length=epoch_length) in order to fix this."
            )
        self.max_epochs = int(state.max_epochs or 0)
        self.total_num_iters = self.max_epochs * int(length)
        sizes = {"STARTED": 1, "COMPLETED": 1, "EPOCH_STARTED": self.max_epochs, "EPOCH_COMPLETED": self.max_epochs}
        self.event_handlers_times = {
            event: torch.zeros(sizes.get(name, self.total_num_iters)) for name, event in _PROFILER_EVENTS.items()
        }
        self.dataflow_times = torch.zeros(self.total_num_iters)
        self.processing_times = torch.zeros(self.total_num_iters)

    def _on_handler(self, event: str, name: str, index: int, seconds: float, internal: bool) -> None:
        # an event's time includes the profiler's own handlers, as Ignite's (its span from its first to its last)
        times = self.event_handlers_times.get(_PROFILER_EVENTS.get(event, event))
        slot = index if event in _ONCE else index - 1
        if times is not None and 0 <= slot < len(times):
            times[slot] += seconds

    def _completed(self, engine: Engine) -> None:
        for iteration in range(1, min(engine.state.iteration, self.total_num_iters) + 1):
            self.processing_times[iteration - 1], self.dataflow_times[iteration - 1] = self._processing_and_dataflow(
                iteration
            )
        super()._completed(engine)

    @staticmethod
    def _compute_basic_stats(data: torch.Tensor) -> OrderedDict[str, Any]:
        data = data[data > 0]
        stats: OrderedDict[str, Any] = OrderedDict(
            [("total", torch.sum(data).item() if len(data) > 0 else "not yet triggered")]
        )
        if len(data) > 1:
            stats["min/index"] = (torch.min(data).item(), torch.argmin(data).item())
            stats["max/index"] = (torch.max(data).item(), torch.argmax(data).item())
            stats["mean"] = torch.mean(data).item()
            stats["std"] = torch.std(data).item()
        return stats

    def get_results(self) -> OrderedDict[str, Any]:
        """`processing_stats`, `dataflow_stats`, `event_handlers_stats` (per event, and `total_time`) and
        `event_handlers_names`, as Ignite's."""
        events = list(self.event_handlers_times)
        total = sum(self.event_handlers_times[event].sum() for event in events)
        handlers_stats: dict[str, Any] = {
            e.name: self._compute_basic_stats(self.event_handlers_times[e]) for e in events
        }
        handlers_stats["total_time"] = total
        return OrderedDict(
            [
                ("processing_stats", self._compute_basic_stats(self.processing_times)),
                ("dataflow_stats", self._compute_basic_stats(self.dataflow_times)),
                ("event_handlers_stats", handlers_stats),
                ("event_handlers_names", {f"{name}_names": self._recorder.names.get(name, []) for name in _PROFILED}),
            ]
        )

    def write_results(self, output_path: str | os.PathLike) -> None:
        """Every iteration's times as CSV: epoch, iteration, processing, dataflow and each event's handlers."""
        per_epoch = self.total_num_iters // max(self.max_epochs, 1)
        times = self.event_handlers_times
        columns = [
            torch.arange(self.max_epochs, dtype=torch.float32).repeat_interleave(per_epoch) + 1,
            torch.arange(self.total_num_iters, dtype=torch.float32) + 1,
            self.processing_times,
            self.dataflow_times,
            times[Events.STARTED].repeat_interleave(self.total_num_iters),
            times[Events.COMPLETED].repeat_interleave(self.total_num_iters),
            times[Events.EPOCH_STARTED].repeat_interleave(per_epoch),
            times[Events.EPOCH_COMPLETED].repeat_interleave(per_epoch),
            times[Events.ITERATION_STARTED],
            times[Events.ITERATION_COMPLETED],
            times[Events.GET_BATCH_STARTED],
            times[Events.GET_BATCH_COMPLETED],
        ]
        headers = ["epoch", "iteration", "processing_stats", "dataflow_stats"]
        headers += [f"Event_{name}" for name in ("STARTED", "COMPLETED", "EPOCH_STARTED", "EPOCH_COMPLETED")]
        headers += [f"Event_{name}" for name in ("ITERATION_STARTED", "ITERATION_COMPLETED")]
        headers += [f"Event_{name}" for name in ("GET_BATCH_STARTED", "GET_BATCH_COMPLETED")]
        _write_csv(output_path, headers, columns)

    @staticmethod
    def print_results(results: Mapping[str, Any]) -> str:
        """Print the summary of `get_results()` as Ignite does, and return it."""

        def text(value: Any) -> str:
            if isinstance(value, str):
                return value
            if isinstance(value, tuple):
                return f"{value[0]:.5f}/{value[1]}"
            return f"{value:.5f}"

        def row(stats: Mapping[str, Any]) -> str:
            return " | ".join(text(value) for value in stats.values())

        handlers = {
            name: row(stats) if isinstance(stats, Mapping) else text(stats)
            for name, stats in results["event_handlers_stats"].items()
        }
        names = results["event_handlers_names"]
        lines = [
            "",
            " ----------------------------------------------------",
            "| Time profiling stats (in seconds):                 |",
            " ----------------------------------------------------",
            "total  |  min/index  |  max/index  |  mean  |  std",
            "",
            "Processing function:",
            row(results["processing_stats"]),
            "",
            "Dataflow:",
            row(results["dataflow_stats"]),
            "",
            "Event handlers:",
            handlers["total_time"],
            "",
        ]
        for event in ("STARTED", "EPOCH_STARTED", "ITERATION_STARTED", "ITERATION_COMPLETED", "EPOCH_COMPLETED"):
            lines += [f"- Events.{event}: {names[f'{event}_names']}", handlers[event], ""]
        lines += [f"- Events.COMPLETED: {names['COMPLETED_names']}", handlers["COMPLETED"], ""]
        message = "\n".join(lines)
        print(message)
        return message


class HandlersTimeProfiler(_Profiler):
    """The time of every handler at every call, and of the processing and the data loading per iteration.
    `get_results()` lists, per handler (and event), total, min/index, max/index, mean and std; then the total, the
    processing and the data flow rows. `print_results(results)` prints it as a table, `write_results(path)` writes
    every call's time as CSV (pandas)."""

    EVENT_FILTER_THESHOLD_TIME = 0.0001

    def __init__(self) -> None:
        super().__init__()
        self.dataflow_times: list[float] = []
        self.processing_times: list[float] = []
        self.event_handlers_times: dict[Any, dict[str, list[float]]] = {}

    def _is_internal(self, handler: Callable) -> bool:
        return super()._is_internal(handler) or "Timer." in repr(handler)  # Ignite leaves its Timer's out too

    def _reset(self, engine: Engine) -> None:
        self.dataflow_times, self.processing_times = [], []
        names = self._recorder.names
        ordered = sorted(names, key=lambda event: _ORDER.index(event) if event in _ORDER else len(_ORDER))
        self.event_handlers_times = {
            getattr(Events, event, event): {name: [] for name in names[event]} for event in ordered
        }

    def _on_handler(self, event: str, name: str, index: int, seconds: float, internal: bool) -> None:
        if internal:
            return
        self.event_handlers_times.setdefault(getattr(Events, event, event), {}).setdefault(name, []).append(seconds)

    def _completed(self, engine: Engine) -> None:
        for iteration in range(1, engine.state.iteration + 1):
            processing, dataflow = self._processing_and_dataflow(iteration)
            if processing:
                self.processing_times.append(processing)
            if dataflow:
                self.dataflow_times.append(dataflow)
        super()._completed(engine)

    def get_results(self) -> list[list[Any]]:
        """One row per handler and event, then the "Total", "Processing" and "Dataflow" rows, as Ignite's."""
        total = round(
            float(sum(sum(t) for per_event in self.event_handlers_times.values() for t in per_event.values())), 5
        )
        rows: list[list[Any]] = [
            [handler, getattr(event, "name", str(event)), *_stats(times)]
            for event, per_event in self.event_handlers_times.items()
            for handler, times in per_event.items()
        ]
        rows.append(["Total", "", total, "", "", "", ""])
        rows.append(["Processing", "None", *_stats(self.processing_times)])
        rows.append(["Dataflow", "None", *_stats(self.dataflow_times)])
        return rows

    def write_results(self, output_path: str | os.PathLike) -> None:
        """Every call's time as CSV, one column per handler (zero-padded to the longest)."""
        columns = [torch.tensor(self.processing_times, dtype=torch.float32), torch.tensor(self.dataflow_times)]
        headers = ["processing_stats", "dataflow_stats"]
        for event, per_event in self.event_handlers_times.items():
            for handler, times in per_event.items():
                headers.append(f"{handler} ({getattr(event, 'name', str(event))})")
                columns.append(torch.tensor(times, dtype=torch.float32))
        longest = max(column.numel() for column in columns)
        columns = [torch.nn.functional.pad(c.float(), (0, longest - c.numel())) for c in columns]
        _write_csv(output_path, ["#", *headers], [torch.arange(longest, dtype=torch.float32) + 1, *columns])

    @staticmethod
    def print_results(results: list[list[Any]]) -> None:
        """Print `get_results()` as Ignite's table: handlers, then the totals."""
        handler_width = max(len(str(row[0])) for row in results) + 4
        event_width = max(len(str(row[1])) for row in results) + 4
        widths = [handler_width, event_width] + [14] * 5
        aligns = ["<", "<"] + [">"] * 5
        row_format = "".join(f"{{: {align}{width}}}  " for align, width in zip(aligns, widths))
        separator = "".join("-" * width + "  " for width in widths)
        headers = ["Handler", "Event Name", "Total(s)", "Min(s)/IDX", "Max(s)/IDX", "Mean(s)", "Std(s)"]
        lines = ["", separator, row_format.format(*headers), separator]
        for row in results[:-3]:
            lines.append(
                row_format.format(
                    row[0], row[1], row[2], "{}/{}".format(*row[3]), "{}/{}".format(*row[4]), row[5], row[6]
                )
            )
        lines += [separator, row_format.format(*results[-3]), separator]
        for row in results[-2:]:
            lines.append(
                f"{row[0]} took total {row[2]}s [min/index: {'{}s/{}'.format(*row[3])}, max/index: "
                f"{'{}s/{}'.format(*row[4])}, mean: {row[5]}s, std: {row[6]}s]"
            )
        print("\n".join(lines) + "\n")


def _stats(times: Sequence[float] | torch.Tensor) -> list[Any]:
    data = torch.as_tensor(times, dtype=torch.float32)
    data = data[data > 0]
    if len(data) == 0:
        return ["not triggered", ("None", "None"), ("None", "None"), "None", "None"]
    std: Any = round(torch.std(data).item(), 5) if len(data) > 1 else "None"
    return [
        round(torch.sum(data).item(), 5),
        (round(torch.min(data).item(), 5), torch.argmin(data).item()),
        (round(torch.max(data).item(), 5), torch.argmax(data).item()),
        round(torch.mean(data).item(), 5),
        std,
    ]
