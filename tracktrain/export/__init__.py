"""Export a trained module for serving, checked against the module's outputs before it is saved: with
`torch.export` to one `.pt2` file (this module), or to an ONNX file that onnxruntime runs (`tracktrain.export.onnx`:
`export_onnx`, `load_onnx`; `pip install 'tracktrain[onnx]'`).

A `.pt2` file holds the graph and the weights, loadable without the module's Python class (`torch.export.load`),
for serving, AOTInductor or ExecuTorch.

`export_module` exports a module as it is, or with a checkpoint's "model" state loaded first (a single file or a
sharded `.dcp` directory, as the Trainer's `ModelCheckpoint` writes them: `best_model_path`), in eval mode, and
checks that the exported program gives the module's outputs on the example before it is saved. `load_exported`
reads the file back as a callable.

    program = export_module(Classifier(), features[:8], "best.pt2", checkpoint=best_path, submodule="net")
    predict = load_exported("best.pt2")
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

__all__ = [
    "ExportError",
    "ExportMismatch",
    "detached_copy",
    "export_module",
    "load_exported",
    "module_from_checkpoint",
]


class ExportError(RuntimeError):
    """`torch.export` could not trace the module; the message names it, the cause and the usual fixes."""


class ExportMismatch(RuntimeError):
    """The exported program's outputs differ from the module's on the example input."""


def export_module(
    module: nn.Module,
    example_input: Any,
    path: str | os.PathLike,
    *,
    checkpoint: str | os.PathLike | None = None,
    submodule: str | None = None,
    dynamic_batch: bool = True,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> torch.export.ExportedProgram:
    """Export `module` with `torch.export.export` and save the program to `path` (a `.pt2` file).

    Args:
        module: the module (a `LoopModule` too: its Trainer is not part of what is exported).
        example_input: the input of one call of `forward`: a tensor, or a tuple of positional arguments (None: the
            module's `example_input_array`). Moved to the module's device. It fixes every shape but the batch
            dimension (see `dynamic_batch`).
        path: where the program is saved (`torch.export.save`); its folder is created.
        checkpoint: a checkpoint whose "model" state is loaded first (`ModelCheckpoint.best_model_path`, a
            `.pt` file or a sharded `.dcp` directory). It is loaded into a copy: `module` keeps its weights.
        submodule: export this attribute of the module (dotted, e.g. "net") rather than the module itself, after
            the checkpoint is loaded into the whole module: for a `LoopModule` whose steps call a network of its
            own and that has no `forward`.
        dynamic_batch: let the first dimension of every tensor input vary where the module allows it
            (`torch.export.Dim.AUTO`; an example with a batch of 1 fixes it to 1). False: every shape is the
            example's.
        rtol, atol: how close the program's outputs on the example must be to the module's.

    Returns the `ExportedProgram` (also saved at `path`); `program.module()` calls it.

    Raises `ExportError` when torch.export cannot trace the module (data-dependent control flow, unsupported
    Python), chaining torch's error, and `ExportMismatch` when the program's outputs differ from the module's.
    """
    module, name = module_to_export(module, checkpoint=checkpoint, submodule=submodule, caller="export_module")
    args = example_args(example_input, module)
    with eval_mode(module):
        program = trace_program(module, name, args, dynamic_batch)
        _check_outputs(module, name, program, args, rtol, atol)
    destination = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(destination)), exist_ok=True)
    torch.export.save(program, destination)
    return program


def module_to_export(
    module: nn.Module, *, checkpoint: str | os.PathLike | None, submodule: str | None, caller: str
) -> tuple[nn.Module, str]:
    """The module to export and its name for messages: a copy holding `checkpoint`'s "model" state when one is given,
    then its `submodule` when one is named; refused when it has no forward(). `caller` names the public function in
    the messages (export_module, export_onnx)."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"{caller}(module=...) must be a torch.nn.Module, got {type(module).__name__}.")
    name = type(module).__name__
    if checkpoint is not None:
        module = module_from_checkpoint(module, checkpoint)
    if submodule is not None:
        module = _submodule(module, submodule, caller)
        name = f"{name}.{submodule}"
    if type(module).forward is nn.Module.forward:
        children = [child for child, _ in module.named_children()]
        raise ExportError(
            f"{name} has no forward() to export. Export the network its steps call: "
            f"{caller}(..., submodule=NAME) with NAME one of {children}, or define forward()."
        )
    return module, name


def example_args(example_input: Any, module: nn.Module) -> tuple[Any, ...]:
    """The positional arguments of one call of `module`: `example_input` (a tensor, or a tuple of arguments; None:
    the module's `example_input_array`, Lightning's), its tensors moved to the module's device."""
    if example_input is None:
        example_input = getattr(module, "example_input_array", None)
        if example_input is None:
            raise ValueError(
                f"No example input to export {type(module).__name__} with: pass example_input (a tensor, or a tuple "
                "of the forward's arguments), or set module.example_input_array."
            )
    args = tuple(example_input) if isinstance(example_input, tuple) else (example_input,)
    parameter = next(module.parameters(), None)
    if parameter is None:
        return args
    return tuple(arg.to(parameter.device) if isinstance(arg, torch.Tensor) else arg for arg in args)


@contextlib.contextmanager
def eval_mode(module: nn.Module) -> Iterator[None]:
    """`module` in eval mode (dropout off, batch norm on its running statistics: the module as it predicts), each
    submodule's own mode given back afterwards, also on an error."""
    modes = {sub: sub.training for sub in module.modules()}
    module.eval()
    try:
        yield
    finally:
        for sub, training in modes.items():
            sub.train(training)


def load_exported(path: str | os.PathLike) -> nn.Module:
    """The program `export_module` saved at `path`, as a callable module (`torch.export.load(path).module()`);
    it needs torch only, not the class of the module that was exported."""
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"No exported program at {os.fspath(path)!r}. Export one with tracktrain.export.export_module(module, "
            "example_input, path)."
        )
    return torch.export.load(path).module()


def module_from_checkpoint(module: nn.Module, checkpoint: str | os.PathLike) -> nn.Module:
    """A copy of `module` (without its Trainer) holding the "model" state of `checkpoint`, a file or a sharded
    `.dcp` directory a Trainer wrote; its keys and shapes are checked against the module before anything loads."""
    from tracktrain.checkpoint.handler import Checkpoint
    from tracktrain.checkpoint.state import read_model_checkpoint

    states = read_model_checkpoint(checkpoint)
    copied = detached_copy(module)
    Checkpoint.load_objects({"model": copied}, {"model": states["model"]})  # keys and shapes checked first
    return copied


def detached_copy(module: nn.Module) -> nn.Module:
    """A deep copy of `module` without its Trainer: a LoopModule refers to the Trainer that fits it (engines,
    loaders, loggers), which is no part of the model. Read from `__dict__` since `LoopModule.trainer` raises when
    none is attached, and an nn.Module keeps plain attributes there (as mlflow_run.save_pytorch_model does)."""
    trainer = module.__dict__.get("_trainer")
    memo: dict[int, Any] = {id(trainer): None} if trainer is not None else {}
    return copy.deepcopy(module, memo)


def _submodule(module: nn.Module, name: str, caller: str) -> nn.Module:
    try:
        found = module.get_submodule(name)
    except AttributeError:
        children = [child for child, _ in module.named_children()]
        raise AttributeError(
            f"{caller}(submodule={name!r}): {type(module).__name__} has no submodule {name!r}; its children "
            f"are {children} (a dotted path reaches deeper, e.g. 'net.0')."
        ) from None
    return found


def trace_program(
    module: nn.Module, name: str, args: tuple[Any, ...], dynamic_batch: bool
) -> torch.export.ExportedProgram:
    """`torch.export.export(module, args)`, the first dimension of each tensor argument free when `dynamic_batch`;
    a failure becomes an `ExportError` naming `name`, the cause and the usual fixes, torch's error chained."""
    dynamic_shapes = None
    if dynamic_batch:
        dynamic_shapes = tuple(
            {0: torch.export.Dim.AUTO} if isinstance(arg, torch.Tensor) and arg.dim() > 0 else None for arg in args
        )
    try:
        return torch.export.export(module, args, dynamic_shapes=dynamic_shapes)
    except Exception as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        gist = (lines or [type(error).__name__])[0][:400]
        raise ExportError(
            f"torch.export could not export {name} ({type(error).__name__}: {gist}). Usual causes and fixes: Python "
            "control flow on a tensor's values (`if x.sum() > 0`, `.item()`, `.tolist()`) -> torch.cond or "
            "torch.where, or move it out of forward(); a shape the batch size cannot take -> dynamic_batch=False; "
            "a step-only module -> submodule=NAME of the network it calls. torch's full error is chained below "
            "(and https://pytorch.org/docs/stable/export.html lists what export supports)."
        ) from error


def _check_outputs(
    module: nn.Module, name: str, program: torch.export.ExportedProgram, args: tuple[Any, ...], rtol: float, atol: float
) -> None:
    with torch.no_grad():
        expected = module(*args)
        got = program.module()(*args)
    try:
        torch.testing.assert_close(got, expected, rtol=rtol, atol=atol)
    except AssertionError as error:
        raise ExportMismatch(
            f"The exported program of {name} does not give the module's outputs on the example input: {error}. "
            "A forward() that draws random numbers in eval mode, or reads state outside its inputs, parameters and "
            "buffers, gives other outputs on each call; make it deterministic in eval mode, or loosen rtol/atol if "
            "the difference is rounding."
        ) from None
