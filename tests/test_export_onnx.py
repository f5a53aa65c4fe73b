"""`tracktrain.export.onnx`: a module, or a checkpoint a real fit wrote (one file, or a sharded `.dcp` directory),
exported to an ONNX file that onnxruntime runs and that gives the module's outputs at other batch sizes; the caller's
module keeps its weights and mode; what cannot be exported, or gives other outputs, fails naming the fix and leaves
no file; without the onnx extra the error says what to install. Real torch.onnx exports, real onnxruntime."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

from tracktrain.checkpoint.state import read_checkpoint
from tracktrain.export import ExportError, ExportMismatch
from tracktrain.export.onnx import export_onnx, load_onnx

from ._export_fixtures import DataDependent, best_checkpoint_of_a_fit
from .trainer._tasks import Classifier

# onnxruntime fuses and reorders float operations: close to the module's outputs, not bit for bit
CLOSE = {"rtol": 1e-4, "atol": 1e-5}


def _state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {key: value.clone() for key, value in module.state_dict().items()}


def test_a_module_is_exported_checked_by_onnxruntime_and_gives_its_outputs_at_any_batch_size(tmp_path):
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3)).train()
    before = _state(module)
    example = torch.randn(8, 4)
    path = tmp_path / "out" / "model.onnx"

    program = export_onnx(module, example, path)

    assert isinstance(program, torch.onnx.ONNXProgram)
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.onnx"]  # one file, weights inside, no leftovers
    assert all(sub.training for sub in module.modules())  # its mode is given back
    for key, value in module.state_dict().items():
        torch.testing.assert_close(value, before[key], rtol=0, atol=0)
    predict = load_onnx(path)
    assert predict.free_batch() == [True]
    module.eval()  # the export ran without dropout: the module predicts so in eval mode
    with torch.no_grad():
        for batch in (example, torch.randn(3, 4), torch.randn(17, 4)):
            torch.testing.assert_close(predict(batch), module(batch), **CLOSE)


def test_the_best_checkpoint_of_a_fit_is_exported_into_a_copy_and_the_module_keeps_its_weights(tmp_path):
    best = best_checkpoint_of_a_fit(tmp_path)
    fresh = Classifier()  # the initial weights: the checkpoint's differ after three epochs
    before = _state(fresh)

    export_onnx(fresh, torch.randn(8, 4), tmp_path / "best.onnx", checkpoint=best)

    expected = Classifier()
    expected.load_state_dict(read_checkpoint(best)["model"])
    predict = load_onnx(tmp_path / "best.onnx")
    with torch.no_grad():
        for x in (torch.randn(5, 4), torch.randn(2, 4)):
            torch.testing.assert_close(predict(x), expected(x), **CLOSE)
        assert not torch.allclose(expected(x), fresh(x))
    for key, value in fresh.state_dict().items():  # loaded into a copy: the module passed is unchanged
        torch.testing.assert_close(value, before[key], rtol=0, atol=0)


class StepsOnly(nn.Module):
    """Like the README's Classifier: its steps call `self.net`, it has no forward of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_a_submodule_of_a_sharded_dcp_checkpoint_is_exported(tmp_path):
    from tracktrain.checkpoint.sharded_saver import ShardedSaver

    trained = StepsOnly()
    with torch.no_grad():
        trained.net[0].weight.add_(1.0)
    ShardedSaver(str(tmp_path))({"model": trained.state_dict()}, "checkpoint_1.dcp")
    with pytest.raises(ExportError, match=r"StepsOnly has no forward\(\).*export_onnx\(\.\.\., submodule=NAME"):
        export_onnx(StepsOnly(), torch.randn(8, 4), tmp_path / "m.onnx")

    export_onnx(
        StepsOnly(), torch.randn(8, 4), tmp_path / "m.onnx", checkpoint=tmp_path / "checkpoint_1.dcp", submodule="net"
    )

    x = torch.randn(5, 4)
    with torch.no_grad():
        torch.testing.assert_close(load_onnx(tmp_path / "m.onnx")(x), trained.net(x), **CLOSE)


def test_dynamic_batch_false_fixes_the_batch_to_the_examples(tmp_path):
    module = nn.Linear(4, 2)
    export_onnx(module, torch.randn(8, 4), tmp_path / "fixed.onnx", dynamic_batch=False)

    predict = load_onnx(tmp_path / "fixed.onnx")
    assert predict.free_batch() == [False]
    with torch.no_grad():
        torch.testing.assert_close(predict(torch.ones(8, 4)), module(torch.ones(8, 4)), **CLOSE)
    with pytest.raises(ValueError, match=r"has shape \[8, 4\].*got a tensor of shape \[3, 4\].*dynamic_batch=True"):
        predict(torch.ones(3, 4))


def test_a_missing_checkpoint_fails_before_anything_is_exported(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"none\.pt"):
        export_onnx(Classifier(), torch.randn(8, 4), tmp_path / "m.onnx", checkpoint=tmp_path / "none.pt")
    with pytest.raises(FileNotFoundError, match=r"No ONNX file at .*export_onnx\(module, example_input, path\)"):
        load_onnx(tmp_path / "m.onnx")


def test_a_module_torch_export_cannot_trace_fails_naming_it_the_cause_and_the_fix(tmp_path):
    with pytest.raises(ExportError, match=r"torch\.export could not export DataDependent \(.+\)\..*torch\.cond") as e:
        export_onnx(DataDependent(), torch.randn(8, 4), tmp_path / "bad.onnx")
    assert e.value.__cause__ is not None  # torch's own error is chained
    assert list(tmp_path.iterdir()) == []


@torch.library.custom_op("tracktrain_tests::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    """An operator torch.export keeps as it is and ONNX has no translation for."""
    return x * 2


@twice.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class CustomOp(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return twice(x)


def test_a_program_onnx_cannot_translate_fails_naming_the_operator_and_the_fix(tmp_path):
    with pytest.raises(
        ExportError, match=r"torch\.onnx could not convert CustomOp to ONNX \(.*twice.*custom_translation_table"
    ):
        export_onnx(CustomOp(), torch.randn(8, 4), tmp_path / "bad.onnx")
    assert list(tmp_path.iterdir()) == []


class Noisy(nn.Module):
    """Draws random numbers in forward even in eval mode: onnxruntime draws others than the module did."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.randn_like(x)


class NoisyBeyondTheExample(nn.Module):
    """Exact on the example's 8 rows, random beyond them: a file right at the example's batch size only, which the
    check on a larger batch must catch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        noise = torch.randn_like(x)
        noise[:8] = 0
        return x + noise


@pytest.mark.parametrize(
    ("module", "where"), [(Noisy(), "the example"), (NoisyBeyondTheExample(), "a batch one larger than the example")]
)
def test_a_file_whose_outputs_differ_from_the_modules_is_refused_and_not_left_behind(tmp_path, module, where):
    name = type(module).__name__
    with pytest.raises(
        ExportMismatch,
        match=rf"ONNX file of {name} does not give the module's outputs on {where}: onnxruntime gives a max abs "
        r"difference of \d",
    ):
        export_onnx(module, torch.randn(8, 4), tmp_path / "n.onnx")
    assert list(tmp_path.iterdir()) == []  # neither the file nor the folder it was checked in


def test_without_the_onnx_extra_the_error_says_what_to_install(tmp_path, monkeypatch):
    # None in sys.modules makes `import onnxruntime` raise ImportError, as when it is not installed: the same path a
    # user without the extra takes, without uninstalling anything
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    install = r"needs onnxruntime, which is not installed .*pip install 'tracktrain\[onnx\]'"
    with pytest.raises(ImportError, match=rf"export_onnx {install}"):
        export_onnx(nn.Linear(4, 2), torch.randn(8, 4), tmp_path / "m.onnx")
    with pytest.raises(ImportError, match=rf"load_onnx {install}"):
        load_onnx(tmp_path / "m.onnx")
    assert list(tmp_path.iterdir()) == []


def test_importing_the_module_loads_no_onnx_package():
    code = (
        "import sys, tracktrain.export.onnx\n"
        "print(sorted(m for m in ('onnx', 'onnxscript', 'onnxruntime') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "[]"
