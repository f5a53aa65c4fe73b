"""`tracktrain.tuning.scale_batch_size`: the largest batch size that fits, found by doubling ("power") then bisecting
("binsearch"), on CPU against a memory budget, with the module put back as it was."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

from tracktrain import Trainer
from tracktrain.tuning import scale_batch_size

from ..trainer._tasks import Classifier, make_loader, quiet

NO_BUDGET = 2**50  # a CPU budget no trial reaches: only out-of-memory errors decide


class OutOfMemoryAbove(Classifier):
    """Raises `torch.OutOfMemoryError` for a batch larger than `limit`, as CUDA does when a batch does not fit. A
    stand-in for a real CUDA out-of-memory error on this CPU-only machine: the finder catches the same exception
    type whichever device raised it. Keeps the batch sizes it was given."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.sizes: list[int] = []

    def train_step(self, batch, batch_idx):
        size = batch[0].shape[0]
        self.sizes.append(size)
        if size > self.limit:
            raise torch.OutOfMemoryError(f"fake: batch of {size} > {self.limit}")
        return super().train_step(batch, batch_idx)


class Hungry(Classifier):
    """Touches 4 MiB of fresh memory per sample in each step (a (batch, 2**20) float tensor): a trial's peak memory
    grows by about batch size × 4 MiB."""

    def train_step(self, batch, batch_idx):
        x, y = batch
        activations = x.repeat(1, 2**18)  # (batch, 4 · 2**18) floats = batch · 4 MiB, every page written
        return F.cross_entropy(self(x), y) + 0.0 * activations.sum()


def trainer_for(tmp_path, **kwargs) -> Trainer:
    return Trainer(**quiet(tmp_path, loggers=False, max_epochs=1, **kwargs))


def test_power_mode_finds_the_largest_power_of_two_that_fits(tmp_path):
    module = OutOfMemoryAbove(limit=40)
    found = scale_batch_size(trainer_for(tmp_path), module, make_loader(n=512), max_memory=NO_BUDGET, steps_per_trial=2)
    assert found == 32
    # each trial ran its steps at its batch size: 2, 4, ... 32 fit (2 steps each), 64 failed at its first step
    assert module.sizes == [2, 2, 4, 4, 8, 8, 16, 16, 32, 32, 64]


@pytest.mark.parametrize(
    ("limit", "trials"),
    [
        (40, [48, 40, 44, 42, 41]),  # bisecting 32..64: down to the last size that fits
        (41, [48, 40, 44, 42, 41]),  # an odd answer: the bisection runs until the two bounds are neighbours
        (63, [48, 56, 60, 62, 63]),
    ],
)
def test_binsearch_refines_between_the_powers(tmp_path, limit, trials):
    module = OutOfMemoryAbove(limit=limit)
    found = scale_batch_size(trainer_for(tmp_path), module, make_loader(n=512), mode="binsearch",
                             max_memory=NO_BUDGET, steps_per_trial=1)  # fmt: skip
    assert found == limit
    assert module.sizes == [2, 4, 8, 16, 32, 64] + trials  # doubling, then bisecting


def test_max_trials_bounds_the_search(tmp_path):
    module = OutOfMemoryAbove(limit=1000)
    found = scale_batch_size(trainer_for(tmp_path), module, make_loader(n=512), max_memory=NO_BUDGET, max_trials=3,
                             steps_per_trial=1)  # fmt: skip
    assert found == 8 and module.sizes == [2, 4, 8]


def test_the_batch_never_outgrows_the_dataset(tmp_path):
    module = OutOfMemoryAbove(limit=1000)
    found = scale_batch_size(trainer_for(tmp_path), module, make_loader(n=48), max_memory=NO_BUDGET, steps_per_trial=1)
    assert found == 48 and module.sizes == [2, 4, 8, 16, 32, 48]


def test_cpu_memory_budget_decides(tmp_path):
    # 4 MiB a sample: 16 → 64 MiB fits in 100 MiB, 32 → 128 MiB does not (both far from the budget: the measure is
    # the process's peak resident set, which also holds a little of the fit's own memory)
    trainer = trainer_for(tmp_path)
    budget = 100 * 2**20
    assert scale_batch_size(trainer, Hungry(), make_loader(n=64), max_memory=budget, steps_per_trial=1) == 16
    found = scale_batch_size(trainer, Hungry(), make_loader(n=64), mode="binsearch", max_memory=budget, init_val=16,
                             steps_per_trial=1)  # fmt: skip
    assert 16 < found < 32 and found * 4 * 2**20 <= budget


def test_module_and_optimizer_come_back_bit_for_bit(tmp_path):
    module = OutOfMemoryAbove(limit=20)
    optimizer = torch.optim.Adam(module.parameters(), lr=0.01)
    module.configure_optimizers = lambda: optimizer  # one optimizer kept between fits
    trainer = trainer_for(tmp_path)
    trainer.fit(module, make_loader())  # Adam has state now
    weights = copy.deepcopy(module.state_dict())
    optimizer_state = copy.deepcopy(optimizer.state_dict())
    rng = torch.get_rng_state()

    assert scale_batch_size(trainer, module, make_loader(n=256), max_memory=NO_BUDGET, update_attr=True) == 16

    assert all(torch.equal(module.state_dict()[k], v) for k, v in weights.items())
    after = optimizer.state_dict()
    assert after["param_groups"] == optimizer_state["param_groups"]
    for key, state in optimizer_state["state"].items():
        assert all(torch.equal(after["state"][key][name], value) for name, value in state.items())
    assert torch.equal(torch.get_rng_state(), rng)
    assert module.batch_size == 16 and module.trainer is trainer and trainer.global_step == 8


class DataModule:
    """Datamodule-like: `batch_size` and a `train_dataloader()` that reads it."""

    def __init__(self) -> None:
        self.batch_size = 4
        self.seen: list[int] = []

    def train_dataloader(self) -> DataLoader:
        self.seen.append(self.batch_size)
        return make_loader(n=512, batch_size=self.batch_size)


def test_a_datamodule_is_asked_for_each_batch_size(tmp_path):
    datamodule = DataModule()
    found = scale_batch_size(trainer_for(tmp_path), OutOfMemoryAbove(limit=20), datamodule, max_memory=NO_BUDGET,
                             steps_per_trial=1)  # fmt: skip
    assert found == 16 and datamodule.seen == [2, 4, 8, 16, 32]
    assert datamodule.batch_size == 4  # put back: update_attr was not asked for


def zeroed(samples):
    """A collate_fn the trials must keep: inputs all zeros."""
    x, y = torch.utils.data.default_collate(samples)
    return torch.zeros_like(x), y


class ZerosOnly(OutOfMemoryAbove):
    def train_step(self, batch, batch_idx):
        assert torch.all(batch[0] == 0), "the loader's collate_fn was not kept"
        return super().train_step(batch, batch_idx)


def test_the_rebuilt_loader_keeps_its_settings(tmp_path):
    module = ZerosOnly(limit=40)
    loader = DataLoader(make_loader(n=100).dataset, batch_size=3, collate_fn=zeroed, drop_last=True, shuffle=True)
    found = scale_batch_size(trainer_for(tmp_path), module, loader, max_memory=NO_BUDGET, steps_per_trial=4)
    assert found == 32 and loader.batch_size == 3
    # drop_last kept: 100 samples in batches of 32 are 3 full ones a pass, never a last one of 4
    assert module.sizes == [2] * 4 + [4] * 4 + [8] * 4 + [16] * 4 + [32] * 4 + [64]


@pytest.mark.parametrize(
    ("loader", "error", "match"),
    [
        ([(torch.zeros(2, 4), torch.zeros(2).long())], TypeError, r"cannot rebuild a list with another batch size"),
        (
            DataLoader(make_loader().dataset, batch_sampler=BatchSampler(SequentialSampler(range(64)), 8, False)),
            ValueError,
            r"this one has batch_sampler=BatchSampler and batch_size=None",
        ),
    ],
)
def test_loaders_it_cannot_rebuild_are_refused(tmp_path, loader, error, match):
    with pytest.raises(error, match=match):
        scale_batch_size(trainer_for(tmp_path), Classifier(), loader, max_memory=NO_BUDGET)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"mode": "linear"}, ValueError, r"mode=\.\.\.\) must be 'power' or 'binsearch', got 'linear'"),
        ({"init_val": 0}, ValueError, r"init_val=\.\.\.\) must be a positive integer, got 0"),
        ({"steps_per_trial": 1.5}, ValueError, r"steps_per_trial=\.\.\.\) must be a positive integer, got 1.5"),
        ({"max_memory": None}, ValueError, r"on CPU needs a memory budget: max_memory=<bytes>"),
        ({"max_memory": -1}, ValueError, r"max_memory=\.\.\.\) must be a number of bytes > 0 or None, got -1"),
    ],
)
def test_bad_arguments_are_refused_by_name(tmp_path, kwargs, error, match):
    kwargs = {"max_memory": NO_BUDGET, **kwargs}
    with pytest.raises(error, match=match):
        scale_batch_size(trainer_for(tmp_path), Classifier(), make_loader(), **kwargs)


def test_nothing_fits_is_an_error_naming_the_fix(tmp_path):
    # 16 samples: 64 MiB, above glibc's largest mmap threshold (32 MiB), so fresh pages whatever the process freed before
    with pytest.raises(RuntimeError, match=r"even batch size 16 does not fit in max_memory=1 bytes\. Lower init_val"):
        scale_batch_size(trainer_for(tmp_path), Hungry(), make_loader(), max_memory=1, init_val=16)
