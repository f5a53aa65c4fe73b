"""`ModelSummary`: at the start of a fit, a table of the module's layers and parameter counts (trainable and frozen),
the size of its parameters, and under a sharding strategy the size each rank holds (its shards).

`Trainer(enable_model_summary=True)` (the default) adds one; `summarize(module, max_depth)` gives the same numbers
as an object, outside a Trainer too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from tracktrain.callbacks.base import Callback
from tracktrain.distributed.logger import get_dist_logger

__all__ = ["LayerSummary", "ModelSummary", "ModelSummaryTable", "summarize"]


@dataclass(frozen=True)
class LayerSummary:
    name: str
    kind: str
    parameters: int
    trainable: int
    in_sizes: Any = None  # with an example input (Lightning's `example_input_array`): what the layer took and gave
    out_sizes: Any = None


@dataclass(frozen=True)
class ModelSummaryTable:
    """What `summarize` found: `layers` down to the depth asked, and the whole module's totals (parameters shared by
    two layers counted once). `local_bytes`: what this process holds of the parameters (its shards under FSDP or
    tensor parallelism, its stages in a pipeline); `sharded`: whether that differs from `total_bytes`."""

    layers: list[LayerSummary] = field(default_factory=list)
    with_sizes: bool = False  # the layers' input and output sizes are known (an example input ran through it)
    trainable_parameters: int = 0
    frozen_parameters: int = 0
    total_bytes: int = 0
    local_bytes: int = 0
    sharded: bool = False

    @property
    def total_parameters(self) -> int:
        return self.trainable_parameters + self.frozen_parameters

    def __str__(self) -> str:
        lines: list[str] = []
        if self.layers:
            rows = [
                ("", "Name", "Type", "Params", "Trainable", *(("In sizes", "Out sizes") if self.with_sizes else ()))
            ]
            rows += [
                (
                    str(index),
                    layer.name,
                    layer.kind,
                    _count(layer.parameters),
                    _trainable(layer),
                    *((_sizes(layer.in_sizes), _sizes(layer.out_sizes)) if self.with_sizes else ()),
                )
                for index, layer in enumerate(self.layers)
            ]
            widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
            lines = [" | ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
            lines.insert(1, "-" * len(max(lines, key=len)))
            lines.append("")
        lines += [
            f"{_count(self.trainable_parameters):<10}Trainable params",
            f"{_count(self.frozen_parameters):<10}Non-trainable params",
            f"{_count(self.total_parameters):<10}Total params",
            f"{self.total_bytes / 1e6:<10.3f}Total estimated model params size (MB)",
        ]
        if self.sharded:
            lines.append(f"{self.local_bytes / 1e6:<10.3f}Params size held by this rank (MB)")
        return "\n".join(lines)


def summarize(module: nn.Module, max_depth: int = 1, example_input: Any = None) -> ModelSummaryTable:
    """The layers of `module` down to `max_depth` (1: its children; -1: every submodule; 0: none, the totals only)
    and its parameter totals. `example_input` (a tensor, a tuple of positional inputs or a dict of keyword ones, as
    Lightning's `example_input_array`): run through the module once, without gradients and in eval mode, to give
    each layer's input and output sizes, as Lightning's summary shows them."""
    if not isinstance(max_depth, int) or isinstance(max_depth, bool) or max_depth < -1:
        raise ValueError(f"max_depth={max_depth!r}: use -1 (every layer), 0 (totals only) or a positive depth.")
    named = [
        (name, child)
        for name, child in module.named_modules()
        if name and (max_depth == -1 or name.count(".") < max_depth)
    ]
    sizes = _layer_sizes(module, named, example_input) if example_input is not None else {}
    layers = [
        LayerSummary(name, type(child).__name__, *_counts(child), *sizes.get(name, (None, None)))
        for name, child in named
    ]
    total, trainable = _counts(module)
    parameters = list(module.parameters())  # each shared parameter once
    total_bytes = sum(parameter.numel() * parameter.element_size() for parameter in parameters)
    local_bytes = sum(_local(parameter).numel() * parameter.element_size() for parameter in parameters)
    return ModelSummaryTable(
        layers=layers,
        with_sizes=example_input is not None,
        trainable_parameters=trainable,
        frozen_parameters=total - trainable,
        total_bytes=total_bytes,
        local_bytes=local_bytes,
        sharded=local_bytes != total_bytes,
    )


def _layer_sizes(module: nn.Module, named: list[tuple[str, nn.Module]], example: Any) -> dict[str, tuple[Any, Any]]:
    """Each named layer's input and output sizes when `example` runs through `module` (hooks removed after)."""
    from tracktrain.engine.batches import move_to_device

    found: dict[str, tuple[Any, Any]] = {}

    def recorder(name: str) -> Any:
        def record(_: nn.Module, inputs: Any, output: Any) -> None:
            found.setdefault(name, (_shapes(inputs[0] if len(inputs) == 1 else inputs), _shapes(output)))

        return record

    handles = [child.register_forward_hook(recorder(name)) for name, child in named]
    device = next((tensor.device for tensor in [*module.parameters(), *module.buffers()]), torch.device("cpu"))
    example = move_to_device(example, device)
    training = module.training
    try:
        module.eval()
        with torch.no_grad():
            if isinstance(example, dict):
                module(**example)
            elif isinstance(example, (list, tuple)):
                module(*example)
            else:
                module(example)
    finally:
        module.train(training)
        for handle in handles:
            handle.remove()
    return found


def _shapes(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return list(value.shape)
    if isinstance(value, (list, tuple)):
        return [_shapes(item) for item in value]
    if isinstance(value, dict):
        return {key: _shapes(item) for key, item in value.items()}
    return "?"


def _sizes(value: Any) -> str:
    return "?" if value is None else str(value)


class ModelSummary(Callback):
    """Logs `summarize(module, max_depth)` at the start of each fit, on rank 0 (`Trainer(enable_model_summary=)`)."""

    def __init__(self, max_depth: int = 1) -> None:
        summarize(nn.Module(), max_depth)  # the depth checked now, not at the fit
        self.max_depth = max_depth
        self.last: ModelSummaryTable | None = None

    def on_fit_start(self, trainer: Any, module: nn.Module) -> None:
        # the example runs in this process alone: not under a strategy whose forward needs every rank
        example = None if trainer.strategy.is_distributed else getattr(module, "example_input_array", None)
        self.last = summarize(module, self.max_depth, example)
        get_dist_logger().info(f"Model summary of {type(module).__name__}:\n{self.last}")


def _counts(module: nn.Module) -> tuple[int, int]:
    parameters = list(module.parameters())  # each shared parameter once
    return (
        sum(parameter.numel() for parameter in parameters),
        sum(parameter.numel() for parameter in parameters if parameter.requires_grad),
    )


def _local(parameter: torch.Tensor) -> torch.Tensor:
    to_local = getattr(parameter, "to_local", None)  # a DTensor's shard on this rank
    return to_local() if callable(to_local) else parameter


def _count(number: int) -> str:
    for unit, size in (("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if number >= size:
            return f"{number / size:.1f} {unit}"
    return str(number)


def _trainable(layer: LayerSummary) -> str:
    if layer.parameters == 0:
        return "-"
    if layer.trainable == layer.parameters:
        return "yes"
    return "no" if layer.trainable == 0 else "partly"
