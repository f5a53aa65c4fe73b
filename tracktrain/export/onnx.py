"""Export a trained module to ONNX: one `.onnx` file that holds the graph and the weights, run without torch or the
module's class by onnxruntime (and TensorRT, OpenVINO, ONNX runtimes in other languages).

`export_onnx` prepares the module as `tracktrain.export.export_module` does (a checkpoint's "model" state loaded into
a copy, a submodule, eval mode), traces it with `torch.export`, converts the program with `torch.onnx.export(...,
dynamo=True)`, saves the file and runs it with onnxruntime on the example, and on a batch one larger, before it is
given its name at `path`: a file that gives other outputs than the module is never left there. `load_onnx` reads it
back as a callable that takes and returns tensors.

    export_onnx(Classifier(), features[:8], "best.onnx", checkpoint=best_path, submodule="net")
    predict = load_onnx("best.onnx")

It needs the `onnx` extra (onnx, onnxscript, onnxruntime: `pip install 'tracktrain[onnx]'`), imported only when a
function here is called, so `import tracktrain` does not load them.
"""

from __future__ import annotations

import importlib
import os
import tempfile
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import torch
import torch.utils._pytree as pytree  # torch's own flattening of nested outputs, as torch.onnx flattens them
from torch import nn

from tracktrain.export import ExportError, ExportMismatch, eval_mode, example_args, module_to_export, trace_program

__all__ = ["OnnxModel", "export_onnx", "load_onnx"]

_PACKAGES = ("onnx", "onnxscript", "onnxruntime")


def export_onnx(
    module: nn.Module,
    example_input: Any,
    path: str | os.PathLike,
    *,
    checkpoint: str | os.PathLike | None = None,
    submodule: str | None = None,
    dynamic_batch: bool = True,
    opset_version: int | None = None,
    rtol: float = 1e-4,
    atol: float = 1e-5,
) -> torch.onnx.ONNXProgram:
    """Export `module` to an ONNX file at `path`, checked by onnxruntime against the module's outputs.

    Args:
        module, example_input, checkpoint, submodule, dynamic_batch: as for `tracktrain.export.export_module`. The
            module is exported in eval mode and given back in its own mode; a checkpoint is loaded into a copy.
            Only the tensors of `example_input` become inputs of the file (other arguments are fixed in the graph).
        path: where the file is saved; its folder is created. Weights over 2 GB (protobuf's limit for one file) go
            to `<path>.data` beside it (ONNX "external data"), which must stay next to the `.onnx` file.
        opset_version: the ONNX opset to target; None: torch.onnx's default (the newest it supports). Lower it for
            a runtime that needs an older one.
        rtol, atol: how close onnxruntime's outputs must be to the module's; onnxruntime fuses and reorders float
            operations, so these are looser than `export_module`'s.

    Returns the `torch.onnx.ONNXProgram` (also saved at `path`); `program.model_proto` is the ONNX model.

    Raises `ImportError` naming the extra when onnx, onnxscript or onnxruntime is missing; `ExportError` when
    torch.export cannot trace the module or torch.onnx cannot convert the program, chaining torch's error;
    `ExportMismatch` when onnxruntime's outputs differ from the module's (on the example, or with `dynamic_batch` on
    a batch one larger). Nothing is written at `path` when it raises.
    """
    for package in _PACKAGES:
        _imported("export_onnx", package)
    module, name = module_to_export(module, checkpoint=checkpoint, submodule=submodule, caller="export_onnx")
    args = example_args(example_input, module)
    destination = os.path.abspath(os.fspath(path))
    os.makedirs(os.path.dirname(destination), exist_ok=True)
    with eval_mode(module):
        program = _convert(trace_program(module, name, args, dynamic_batch), name, opset_version)
        # saved and checked in a folder of its own, then moved into place: a failed check leaves nothing at `path`
        with tempfile.TemporaryDirectory(dir=os.path.dirname(destination), prefix=".onnx-export-") as folder:
            staged = os.path.join(folder, os.path.basename(destination))
            program.save(staged)  # external data, when written, is named after the file: `<name>.data`
            _check_outputs(module, name, load_onnx(staged), args, rtol, atol)
            for written in os.listdir(folder):
                os.replace(os.path.join(folder, written), os.path.join(os.path.dirname(destination), written))
    return program


class OnnxModel:
    """An ONNX file run by onnxruntime, called like the module it was exported from: the example's tensors in the
    same order (torch tensors, on any device), the outputs back as CPU tensors, a tuple when there are several.
    `session` is the `onnxruntime.InferenceSession`, for its options, providers and metadata."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.inputs = list(session.get_inputs())

    def __call__(self, *tensors: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        if len(tensors) != len(self.inputs):
            names = [spec.name for spec in self.inputs]
            raise TypeError(
                f"This ONNX model takes {len(self.inputs)} tensor(s) {names}, got {len(tensors)}: pass the tensors of "
                "the example it was exported with, in the same order (its other arguments are fixed in the graph)."
            )
        for spec, tensor in zip(self.inputs, tensors):
            _check_shape(spec, tensor)
        feeds = {spec.name: tensor.detach().cpu().numpy() for spec, tensor in zip(self.inputs, tensors)}
        outputs = tuple(torch.from_numpy(array) for array in self.session.run(None, feeds))
        return outputs[0] if len(outputs) == 1 else outputs

    def free_batch(self) -> list[bool]:
        """For each input, whether its first dimension is free (symbolic) rather than fixed."""
        return [bool(spec.shape) and not isinstance(spec.shape[0], int) for spec in self.inputs]


def load_onnx(path: str | os.PathLike, providers: Sequence[str] = ("CPUExecutionProvider",)) -> OnnxModel:
    """The ONNX file at `path` (with its `.data` beside it, if any) in an onnxruntime session on `providers`, as a
    callable `OnnxModel`. Needs onnxruntime only: not torch.onnx, not the class of the module that was exported."""
    onnxruntime = _imported("load_onnx", "onnxruntime")
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"No ONNX file at {os.fspath(path)!r}. Export one with tracktrain.export.onnx.export_onnx(module, "
            "example_input, path)."
        )
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # errors only: its warnings about unused initializers are not the user's business
    session = onnxruntime.InferenceSession(os.fspath(path), sess_options=options, providers=list(providers))
    return OnnxModel(session)


def _imported(caller: str, package: str) -> ModuleType:
    """`package`, imported here rather than at the module's top: the core imports and runs without the onnx extra."""
    try:
        return importlib.import_module(package)
    except ImportError as error:
        raise ImportError(
            f"{caller} needs {package}, which is not installed (or cannot be imported: {error}). Install the ONNX "
            "extra: pip install 'tracktrain[onnx]' (onnx, onnxscript and onnxruntime)."
        ) from error


def _convert(program: torch.export.ExportedProgram, name: str, opset_version: int | None) -> torch.onnx.ONNXProgram:
    """torch.onnx's dynamo exporter on the program torch.export traced (so a tracing failure is export_module's
    ExportError, and the free batch dimension is the program's); a failure to translate becomes an ExportError."""
    try:
        onnx_program = torch.onnx.export(program, (), dynamo=True, opset_version=opset_version, verbose=False)
    except Exception as error:
        raise ExportError(
            f"torch.onnx could not convert {name} to ONNX ({_gist(error)}). Usual causes and fixes: an operator "
            "ONNX has no translation for (a custom op, a new aten op) -> a translation of your own through "
            "torch.onnx.export's custom_translation_table, a newer onnxscript, or serve the .pt2 of "
            "tracktrain.export.export_module instead; an opset_version too old for an operator -> a newer one or "
            "None. torch's full error is chained below."
        ) from error
    assert onnx_program is not None  # the dynamo exporter always returns the program
    return onnx_program


def _gist(error: BaseException) -> str:
    """The first line of the innermost error: torch.onnx wraps the real cause in generic 'step 3/3' advice."""
    while error.__cause__ is not None:
        error = error.__cause__
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {(lines or ['(no message)'])[0][:400]}"


def _check_shape(spec: Any, tensor: torch.Tensor) -> None:
    fixed = [size if isinstance(size, int) else None for size in spec.shape]
    if len(fixed) != tensor.dim() or any(size is not None and size != got for size, got in zip(fixed, tensor.shape)):
        raise ValueError(
            f"ONNX input {spec.name!r} has shape {list(spec.shape)} (a name is a free dimension), got a tensor of "
            f"shape {list(tensor.shape)}. Export with dynamic_batch=True (and an example batch larger than 1) for "
            "a free batch dimension."
        )


def _check_outputs(
    module: nn.Module, name: str, model: OnnxModel, args: tuple[Any, ...], rtol: float, atol: float
) -> None:
    """onnxruntime's outputs against the module's on the example, and on a batch one larger where the file's batch
    dimension is free (the example's first row appended): a graph that kept the example's batch size fails there."""
    checks = [("the example", args)]
    free = model.free_batch()
    if any(free):
        flags = iter(free)  # one per tensor argument, in order
        larger = tuple(_one_more(arg, next(flags)) if isinstance(arg, torch.Tensor) else arg for arg in args)
        checks.append(("a batch one larger than the example", larger))
    for where, call in checks:
        with torch.no_grad():
            expected = [leaf.cpu() for leaf in pytree.tree_leaves(module(*call)) if isinstance(leaf, torch.Tensor)]
        got = model(*[arg for arg in call if isinstance(arg, torch.Tensor)])
        problem = _difference(list(got) if isinstance(got, tuple) else [got], expected, rtol, atol)
        if problem is not None:
            raise ExportMismatch(
                f"The ONNX file of {name} does not give the module's outputs on {where}: onnxruntime gives "
                f"{problem}. A forward() that draws random numbers in eval mode, or reads state outside its inputs, "
                "parameters and buffers, gives other outputs on each call: make it deterministic in eval mode. A "
                "difference that is rounding: loosen rtol/atol. A batch size kept inside the graph: "
                "dynamic_batch=False."
            )


def _one_more(tensor: torch.Tensor, free: bool) -> torch.Tensor:
    return torch.cat((tensor, tensor[:1])) if free else tensor


def _difference(got: list[torch.Tensor], expected: list[torch.Tensor], rtol: float, atol: float) -> str | None:
    """How `got` differs from `expected` beyond rtol/atol (their shapes, or the max abs difference); None: close."""
    if [tuple(t.shape) for t in got] != [tuple(t.shape) for t in expected]:
        return f"shapes {[list(t.shape) for t in got]} where the module gives {[list(t.shape) for t in expected]}"
    pairs = [(g.double(), e.double()) for g, e in zip(got, expected)]
    if all(torch.allclose(g, e, rtol=rtol, atol=atol, equal_nan=True) for g, e in pairs):
        return None
    largest = max((g - e).abs().max().item() for g, e in pairs if g.numel())
    return f"a max abs difference of {largest:.3g} (rtol={rtol}, atol={atol})"
