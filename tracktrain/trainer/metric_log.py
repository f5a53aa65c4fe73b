"""`MetricLog`: what `LoopModule.log` records in one stage, per step and aggregated over an epoch.

Values stay tensors on their device. A per-step value is only replaced each step; it is read from the device
when it is published (at the log interval) or shown. A per-epoch value is accumulated with tensor ops and
reduced once at the epoch's end, across processes too when asked (`sync_dist`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from tracktrain.checks.numeric import is_integral, is_real

if TYPE_CHECKING:
    from tracktrain.trainer.strategies.base import Strategy

__all__ = ["DATALOADER_SUFFIX", "MetricLog", "is_torchmetrics_metric", "scalar_values", "to_floats"]

_REDUCE = ("mean", "sum", "max", "min")
#: what names logged under one of several loaders end with, followed by its index (Lightning's)
DATALOADER_SUFFIX = "/dataloader_idx_"


class _Logged:
    """One logged name: its options, its latest step value and its running epoch aggregate."""

    __slots__ = (
        "on_step",
        "on_epoch",
        "reduce",
        "sync_dist",
        "logger",
        "step_value",
        "step_fresh",
        "total",
        "weight",
        "metric",
    )

    def __init__(self, on_step: bool, on_epoch: bool, reduce: str, sync_dist: bool, logger: bool) -> None:
        self.on_step = on_step
        self.on_epoch = on_epoch
        self.reduce = reduce
        self.sync_dist = sync_dist
        self.logger = logger  # False: in callback_metrics (and the bar), never published
        self.step_value: torch.Tensor | None = None
        self.step_fresh = False
        self.total: torch.Tensor | None = None
        self.weight = 0.0
        self.metric: Any = None  # a TorchMetrics metric logged under this name: its own state, computed at the end


class MetricLog:
    """The values logged in one stage ("train", "validate" or "test") of a Trainer.

    Args:
        stage: the stage, for error messages.
        callback_metrics: the Trainer's dict of latest values (tensors), shared by all stages.
        progress_bar_names: the Trainer's set of names shown in the progress bar, shared by all stages.
        per_step_in_step: whether values logged inside a step default to per-step (True for training).
        batch_size_of: the length of the current batch, for weighting means when `batch_size` is not given.
        strategy: the fit's, which reduces `sync_dist` values across its ranks.
    """

    def __init__(
        self,
        stage: str,
        callback_metrics: dict[str, Any],
        progress_bar_names: set[str],
        per_step_in_step: bool,
        batch_size_of: Callable[[Any], int],
        strategy: Strategy,
    ) -> None:
        self.stage = stage
        self.callback_metrics = callback_metrics
        self.progress_bar_names = progress_bar_names
        self._per_step_in_step = per_step_in_step
        self._batch_size_of = batch_size_of
        self._strategy = strategy
        self._entries: dict[str, _Logged] = {}
        self._batches_seen: dict[int, int] = {}  # per loader, in an evaluation pass
        self.in_step = False
        self.batch: Any = None  # set by the Trainer before each step
        self._epoch_values: dict[str, torch.Tensor] | None = None
        self._batch_size: int | None = None
        self._batch_size_for: Any = None
        #: while a pass reads several loaders (`batches.SequentialLoaders`): what its steps and batch hooks log is
        #: named `name/dataloader_idx_N` after the loader of the batch, as Lightning names it
        self.loaders: Any = None

    def reset(self) -> None:
        """Forget the period's values (at the start of each epoch); until `enter_steps`, values log per epoch."""
        for entry in self._entries.values():
            if entry.metric is not None:  # a TorchMetrics metric's state is the period's too
                entry.metric.reset()
        self._entries = {}
        self.in_step = False
        self._epoch_values = None
        self._batches_seen = {}

    def enter_steps(self) -> None:
        """The period's steps begin: from here to the epoch's end (batch hooks and backward hooks included),
        values logged in training default to per step."""
        self.in_step = True

    def log(
        self,
        name: str,
        value: torch.Tensor | float,
        prog_bar: bool = False,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce: str = "mean",
        sync_dist: bool = False,
        batch_size: int | None = None,
        add_dataloader_idx: bool = True,
        logger: bool = True,
    ) -> None:
        if add_dataloader_idx and self.loaders is not None and self.in_step and isinstance(name, str):
            # the epoch hooks' values are every loader's: no index
            name = f"{name}{DATALOADER_SUFFIX}{self.loaders.dataloader_idx}"
        entry = self._entries.get(name)
        if entry is None:
            entry = self._new_entry(name, prog_bar, on_step, on_epoch, reduce, sync_dist, logger)
        elif (
            (on_step is not None and on_step != entry.on_step)
            or (on_epoch is not None and on_epoch != entry.on_epoch)
            or (reduce != entry.reduce)
        ):
            raise ValueError(
                f"self.log({name!r}) was called with on_step={on_step}, on_epoch={on_epoch}, reduce={reduce!r}, "
                f"but earlier in this epoch with on_step={entry.on_step}, on_epoch={entry.on_epoch}, "
                f"reduce={entry.reduce!r}. Log a name with the same options every time."
            )
        if not isinstance(value, torch.Tensor) and is_torchmetrics_metric(value):  # a tensor: no class walk
            self._log_metric(name, entry, value)
            return
        value = _as_scalar_tensor(name, value)
        if batch_size is not None:
            batch_size = _checked_batch_size(batch_size)
        if entry.on_step:
            entry.step_value = value
            entry.step_fresh = True
            self.callback_metrics[name] = value
            if entry.on_epoch:
                self.callback_metrics[f"{name}_step"] = value
        if entry.on_epoch:
            self._epoch_values = None
            self._accumulate(entry, value, batch_size)
            if not self.in_step:  # logged from a hook: visible at once to the hooks and callbacks after it
                self.callback_metrics[name] = _aggregate(entry)

    def _log_metric(self, name: str, entry: _Logged, metric: Any) -> None:
        """A TorchMetrics metric: per step, the value of its last `forward` (this batch's); per epoch, its
        `compute()` over everything it was updated with (synced across processes by TorchMetrics), at the end."""
        if entry.metric is None and entry.total is None:
            entry.metric = metric
        elif entry.metric is not metric:
            raise ValueError(
                f"self.log({name!r}) got another value than the metric object logged under that name earlier in "
                "this epoch: log one TorchMetrics metric per name (an attribute of the module), every time."
            )
        if entry.on_step:
            batch_value = getattr(metric, "_forward_cache", None)
            if batch_value is not None:  # updated by calling it: this batch's value
                entry.step_value = _as_scalar_tensor(name, batch_value)
                entry.step_fresh = True
                self.callback_metrics[name] = entry.step_value
                if entry.on_epoch:
                    self.callback_metrics[f"{name}_step"] = entry.step_value
        if entry.on_epoch:
            self._epoch_values = None

    def _new_entry(
        self,
        name: str,
        prog_bar: bool,
        on_step: bool | None,
        on_epoch: bool | None,
        reduce: str,
        sync_dist: bool,
        logger: bool,
    ) -> _Logged:
        if not isinstance(name, str) or not name:
            raise TypeError(f"self.log needs a non-empty string name, got {name!r}.")
        if reduce not in _REDUCE:
            raise ValueError(f"self.log({name!r}, reduce=...) must be one of {_REDUCE}, got {reduce!r}.")
        per_step = self._per_step_in_step and self.in_step
        on_step = per_step if on_step is None else bool(on_step)
        on_epoch = (not per_step) if on_epoch is None else bool(on_epoch)
        if not (on_step or on_epoch):
            raise ValueError(f"self.log({name!r}) with on_step=False and on_epoch=False records nothing; set one.")
        if on_step and not self.in_step:
            raise ValueError(
                f"self.log({name!r}, on_step=True) outside the {self.stage} steps: per-step values are logged from the "
                "steps (and the batch and backward hooks). Log it with on_epoch=True."
            )
        if prog_bar:  # Lightning's names: a value logged per step and per epoch shows as both
            self.progress_bar_names.update((f"{name}_step", f"{name}_epoch") if on_step and on_epoch else (name,))
        entry = _Logged(on_step, on_epoch, reduce, bool(sync_dist), bool(logger))
        self._entries[name] = entry
        return entry

    def _accumulate(self, entry: _Logged, value: torch.Tensor, batch_size: int | None) -> None:
        reduce = entry.reduce
        if reduce == "mean":
            weight = self._current_batch_size() if batch_size is None else batch_size
            if entry.total is None:
                entry.total = value.float() * weight  # a new tensor, owned here: later batches add into it
            else:
                entry.total.add_(value, alpha=weight)  # one kernel per batch
            entry.weight += weight
        elif entry.total is None:
            entry.total = value.float()
        elif reduce == "sum":
            entry.total = entry.total + value
        elif reduce == "max":
            entry.total = torch.maximum(entry.total, value)
        else:
            entry.total = torch.minimum(entry.total, value)

    def _current_batch_size(self) -> int:
        if not self.in_step:
            return 1
        if self._batch_size_for is not self.batch:  # inferred once per batch, and only when a mean needs it
            self._batch_size = self._batch_size_of(self.batch)
            self._batch_size_for = self.batch
        return self._batch_size  # type: ignore[return-value]

    # ------------------------------------------------------------------------------------------ reading back
    @property
    def has_step_values(self) -> bool:
        """Whether a per-step value was logged since `step_values` was last read."""
        return any(entry.step_fresh for entry in self._entries.values())

    @property
    def batches_seen(self) -> int:
        """In an evaluation pass: the batches of the current loader read so far (Lightning's step for the values an
        evaluation logs per step)."""
        return self._batches_seen.get(self.loaders.dataloader_idx if self.loaders is not None else 0, 0)

    def count_batch(self) -> None:
        """A step of this period ran (an evaluation counts them per loader, for `batches_seen`)."""
        index = self.loaders.dataloader_idx if self.loaders is not None else 0
        self._batches_seen[index] = self._batches_seen.get(index, 0) + 1

    def forget_step_values(self) -> None:
        """An evaluation's epoch ended: its per-step values leave `callback_metrics` (its epoch values stay), as in
        Lightning; a fit's last step values stay."""
        for name, entry in self._entries.items():
            if entry.on_step:
                self.callback_metrics.pop(f"{name}_step" if entry.on_epoch else name, None)

    def latest_step_values(self) -> dict[str, torch.Tensor]:
        """The latest per-step value of each name for the loggers (`name_step` for names also logged per epoch),
        read without marking them published; a `sync_dist` value under several processes is left out (it is reduced,
        a collective of every rank, only when published)."""
        distributed = self._strategy.is_distributed
        return {
            f"{name}_step" if entry.on_epoch else name: entry.step_value
            for name, entry in self._entries.items()
            if entry.step_value is not None and entry.logger and not (entry.sync_dist and distributed)
        }

    def step_values(self) -> dict[str, torch.Tensor]:
        """The per-step values logged since the last call (`name_step` for names also logged per epoch), but those
        logged with `logger=False`."""
        values = {}
        for name, entry in self._entries.items():
            if entry.step_fresh:
                entry.step_fresh = False
                value = entry.step_value
                assert value is not None  # fresh: a step value was logged
                if entry.sync_dist and self._strategy.is_distributed:
                    value = self._reduce_across_ranks(value, "mean")  # on every rank, published or not
                if entry.logger:
                    values[f"{name}_step" if entry.on_epoch else name] = value
        return values

    def epoch_values(self) -> dict[str, torch.Tensor]:
        """The epoch's aggregates, reduced across processes where `sync_dist` (every rank must call this), and
        stored in `callback_metrics` under `name` (and `name_epoch` for names also logged per step); those logged
        with `logger=False` are only stored. Computed again only when something was logged since the last call."""
        self.in_step = False
        if self._epoch_values is not None:
            return dict(self._epoch_values)
        values = {}
        for name, entry in self._entries.items():
            if entry.metric is not None and entry.on_epoch and entry.total is None:
                # once per period, on every rank (TorchMetrics syncs its state across processes in compute)
                entry.total = _as_scalar_tensor(name, entry.metric.compute())
            if not entry.on_epoch or entry.total is None:
                continue
            total, weight = entry.total, entry.weight
            if entry.metric is not None:
                value = total  # the metric's own value over the period
            else:
                if entry.sync_dist and self._strategy.is_distributed:
                    if entry.reduce == "mean":
                        total, weight = self._sum_across_ranks(total, weight)
                    else:
                        total = self._reduce_across_ranks(total, entry.reduce)
                value = _aggregate(entry, total, weight)
            self.callback_metrics[name] = value
            if entry.on_step:
                self.callback_metrics[f"{name}_epoch"] = value
            if entry.logger:
                values[f"{name}_epoch" if entry.on_step else name] = value
        self._epoch_values = values
        return dict(values)

    # ------------------------------------------------------------------------------- across ranks (sync_dist)
    def _reduce_across_ranks(self, value: torch.Tensor, reduce: str) -> torch.Tensor:
        """`value` reduced over the ranks by the strategy: summed, averaged, or its maximum or minimum."""
        if reduce == "mean":
            return self._strategy.reduce_tensor(value, "sum") / self._strategy.world_size
        return self._strategy.reduce_tensor(value, reduce)

    def _sum_across_ranks(self, total: torch.Tensor, weight: float) -> tuple[torch.Tensor, float]:
        """A mean's total and its weight, each summed over the ranks, in one collective (in float64, as they are
        reduced); reading the weight back is a sync (at an epoch's end, where the values are read anyway)."""
        pair = torch.stack(
            [total.detach().reshape(()).double(), torch.tensor(weight, dtype=torch.float64, device=total.device)]
        )
        summed = self._strategy.reduce_tensor(pair, "sum")
        return summed[0].reshape(total.shape).to(total.dtype), float(summed[1])


def _aggregate(entry: _Logged, total: torch.Tensor | None = None, weight: float | None = None) -> torch.Tensor:
    total = entry.total if total is None else total
    weight = entry.weight if weight is None else weight
    assert total is not None  # aggregated only once something was logged
    return total / weight if entry.reduce == "mean" else total


def is_torchmetrics_metric(value: Any) -> bool:
    """Whether `value` is a TorchMetrics `Metric`, or of a subclass (known by name: the core does not import
    TorchMetrics)."""
    return any(kind.__name__ == "Metric" and kind.__module__.startswith("torchmetrics") for kind in type(value).__mro__)


def _as_scalar_tensor(name: str, value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"self.log({name!r}) needs a scalar, got a tensor of shape {tuple(value.shape)}. Reduce it first "
                "(e.g. value.mean()) or log a metric."
            )
        return value.detach()
    if is_real(value) and not isinstance(value, bool):
        return torch.tensor(float(value))
    raise TypeError(f"self.log({name!r}) needs a number or a one-element tensor, got {type(value).__name__} {value!r}.")


def _checked_batch_size(batch_size: Any) -> int:
    if not is_integral(batch_size) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"self.log(..., batch_size=) must be a positive integer, got {batch_size!r}.")
    return int(batch_size)


def to_floats(values: dict[str, Any]) -> dict[str, float]:
    """Logged values as Python floats, read from each device in one transfer (the one sync of publishing)."""
    floats: dict[str, float] = {}
    by_device: dict[torch.device, list[str]] = {}
    for name, value in values.items():
        if isinstance(value, torch.Tensor):
            by_device.setdefault(value.device, []).append(name)
        else:
            floats[name] = float(value)
    for names in by_device.values():
        # float64: a float64 value reads back exactly, a float32 one is widened without loss
        stacked = torch.stack([values[name].detach().reshape(()).double() for name in names])
        floats.update(zip(names, stacked.tolist()))  # the sync point
    return {name: floats[name] for name in values}


def scalar_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """The numbers among `values` (an engine's metrics may also hold vectors or matrices, which loggers do not
    take as scalars: those stay in `engine.state.metrics`)."""
    return {
        name: value
        for name, value in values.items()
        if (isinstance(value, torch.Tensor) and value.numel() == 1) or (is_real(value) and not isinstance(value, bool))
    }
