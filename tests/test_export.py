"""`tracktrain.export`: a module, or a checkpoint a real fit wrote (one file, or a sharded `.dcp` directory), exported
with torch.export, saved, loaded back without the module's class, and giving the module's outputs; a module
torch.export cannot trace fails with an error that names it and the fix."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tracktrain.checkpoint.state import read_checkpoint
from tracktrain.export import ExportError, ExportMismatch, export_module, load_exported

from ._export_fixtures import DataDependent, best_checkpoint_of_a_fit
from .trainer._tasks import Classifier


def _same(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_module_is_exported_in_eval_mode_loaded_back_and_gives_its_outputs_at_any_batch_size(tmp_path):
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3)).train()
    example = torch.randn(8, 4)
    path = tmp_path / "out" / "model.pt2"

    program = export_module(module, example, path)

    assert path.is_file() and isinstance(program, torch.export.ExportedProgram)
    assert module.training and all(sub.training for sub in module.modules())  # its mode is given back
    exported = load_exported(path)
    module.eval()  # the export ran without dropout: the module predicts so in eval mode
    with torch.no_grad():
        for batch in (example, torch.randn(3, 4), torch.randn(17, 4)):  # the batch dimension stayed free
            _same(exported(batch), module(batch))


def test_the_best_checkpoint_of_a_fit_is_exported_into_a_copy_and_the_module_keeps_its_weights(tmp_path):
    best = best_checkpoint_of_a_fit(tmp_path)

    fresh = Classifier()  # the initial weights: the checkpoint's differ after three epochs
    before = {key: value.clone() for key, value in fresh.state_dict().items()}
    export_module(fresh, torch.randn(8, 4), tmp_path / "best.pt2", checkpoint=best)

    expected = Classifier()
    expected.load_state_dict(read_checkpoint(best)["model"])
    x = torch.randn(5, 4)
    with torch.no_grad():
        _same(load_exported(tmp_path / "best.pt2")(x), expected(x))
        assert not torch.equal(expected(x), fresh(x))
    for key, value in fresh.state_dict().items():  # loaded into a copy: the module passed is unchanged
        _same(value, before[key])


def test_a_sharded_dcp_checkpoint_is_exported_like_a_single_file(tmp_path):
    from tracktrain.checkpoint.sharded_saver import ShardedSaver

    trained = Classifier()
    with torch.no_grad():
        trained.net.weight.add_(1.0)
    ShardedSaver(str(tmp_path))({"model": trained.state_dict()}, "checkpoint_1.dcp")
    directory = tmp_path / "checkpoint_1.dcp"
    assert directory.is_dir()

    export_module(Classifier(), torch.randn(8, 4), tmp_path / "sharded.pt2", checkpoint=directory)

    x = torch.randn(5, 4)
    with torch.no_grad():
        _same(load_exported(tmp_path / "sharded.pt2")(x), trained(x))


def test_a_module_torch_export_cannot_trace_fails_naming_it_the_cause_and_the_fix(tmp_path):
    with pytest.raises(ExportError, match=r"torch\.export could not export DataDependent \(.+\)\..*torch\.cond") as e:
        export_module(DataDependent(), torch.randn(8, 4), tmp_path / "bad.pt2")
    assert e.value.__cause__ is not None  # torch's own error is chained
    assert not (tmp_path / "bad.pt2").exists()


class StepsOnly(nn.Module):
    """Like the README's Classifier: its steps call `self.net`, it has no forward of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_a_module_without_forward_names_its_children_and_exports_one_of_them(tmp_path):
    module = StepsOnly()
    with pytest.raises(ExportError, match=r"StepsOnly has no forward\(\).*submodule=NAME.*\['net'\]"):
        export_module(module, torch.randn(8, 4), tmp_path / "m.pt2")
    with pytest.raises(AttributeError, match=r"no submodule 'body'; its children are \['net'\]"):
        export_module(module, torch.randn(8, 4), tmp_path / "m.pt2", submodule="body")

    export_module(module, torch.randn(8, 4), tmp_path / "m.pt2", submodule="net")
    x = torch.randn(2, 4)
    with torch.no_grad():
        _same(load_exported(tmp_path / "m.pt2")(x), module.net(x))


class Noisy(nn.Module):
    """Draws random numbers in forward even in eval mode: the program draws others than the module did."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.randn_like(x)


def test_a_program_whose_outputs_differ_from_the_modules_is_refused_and_not_saved(tmp_path):
    with pytest.raises(ExportMismatch, match=r"exported program of Noisy does not give the module's outputs"):
        export_module(Noisy(), torch.randn(8, 4), tmp_path / "n.pt2")
    assert not (tmp_path / "n.pt2").exists()


def test_loading_a_missing_file_says_how_to_make_one(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"No exported program at .*export_module\(module, example_input"):
        load_exported(tmp_path / "none.pt2")
