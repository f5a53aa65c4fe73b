"""`tracktrain.utilities` is Lightning's `lightning.pytorch.utilities` for ported programs: every name Lightning 2.6
exports there is ours (compared with Lightning's own on the same inputs)."""

from __future__ import annotations

import random

import pytest
import torch
from torch import nn

import tracktrain.utilities as ours
from tracktrain import LoopModule
from tracktrain.utilities.rank_zero import rank_zero_only
from tracktrain.utilities.seed import isolate_rng

lightning_utilities = pytest.importorskip("lightning.pytorch.utilities")


def test_every_name_lightning_exports_there_is_ours():
    missing = [name for name in lightning_utilities.__all__ if not hasattr(ours, name)]
    assert not missing, f"lightning.pytorch.utilities names without ours: {missing}"
    # CombinedLoader under Lightning's path (compared with Lightning's in tests/engine/test_combined_loader.py)
    assert list(ours.CombinedLoader([[1], [2, 3]], "max_size_cycle")) == [([1, 2], 0, 0), ([1, 3], 1, 0)]


def tied_model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 3))
    model[2].weight = model[0].weight  # tied, as an encoder-decoder's embeddings
    return model


def test_grad_norm_and_shared_parameters_are_lightnings():
    model = tied_model()
    model(torch.randn(5, 3)).sum().backward()
    for norm in (2, "inf", 1.5):
        theirs = lightning_utilities.grad_norm(model, norm_type=norm)
        mine = ours.grad_norm(model, norm_type=norm)
        assert mine.keys() == theirs.keys()
        assert all(torch.allclose(mine[key], theirs[key]) for key in theirs)
    assert ours.find_shared_parameters(model) == lightning_utilities.find_shared_parameters(model)
    with pytest.raises(ValueError, match="norm_type"):
        ours.grad_norm(model, norm_type=0)


def test_measure_flops_counts_what_lightning_counts():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    x = torch.randn(4, 8)
    assert ours.measure_flops(model, lambda: model(x)) == lightning_utilities.measure_flops(model, lambda: model(x))
    with_backward = ours.measure_flops(model, lambda: model(x), lambda y: y.sum())
    assert with_backward == lightning_utilities.measure_flops(model, lambda: model(x), lambda y: y.sum())


def test_rank_zero_only_runs_on_rank_zero_and_returns_the_default_elsewhere(monkeypatch):
    calls = []

    @rank_zero_only
    def note(value):
        calls.append(value)
        return value

    assert note(1) == 1 and calls == [1]
    monkeypatch.setenv("RANK", "1")
    assert note(2) is None and calls == [1]  # the rank read from torchrun's environment
    assert rank_zero_only(lambda: "here", default="elsewhere")() == "elsewhere"
    rank_zero_only.rank = 0  # as Lightning's programs may set it
    try:
        assert note(3) == 3
    finally:
        rank_zero_only._rank = None


def test_isolate_rng_gives_the_generators_back():
    torch.manual_seed(1)
    random.seed(1)
    with isolate_rng():
        torch.rand(3)
        random.random()
    after = torch.rand(1), random.random()
    torch.manual_seed(1)
    random.seed(1)
    assert after == (torch.rand(1), random.random())


def test_attribute_dict_is_the_type_of_a_modules_hparams_and_enums_compare_as_lightnings():
    class Module(LoopModule):
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__()
            self.save_hyperparameters()

    assert isinstance(Module().hparams, ours.AttributeDict) and Module().hparams.lr == 0.1
    assert ours.GradClipAlgorithmType.NORM == "Norm" == lightning_utilities.GradClipAlgorithmType.NORM
    assert ours.GradClipAlgorithmType.from_str("value") is ours.GradClipAlgorithmType.VALUE
    moved = ours.move_data_to_device({"x": [torch.ones(1)]}, "cpu")
    assert moved["x"][0].device.type == "cpu" and ours.is_picklable(moved) and not ours.is_picklable(lambda: 0)
    assert ours.suggested_max_num_workers(1) >= 1
