"""`Trainer(fast_dev_run=N)`: N batches of each stage and nothing left behind (no checkpoint, no tracker files, no
resume from an earlier run's checkpoint); `Trainer(overfit_batches=N)`: the same N training batches every epoch, in
order, and N validation batches."""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils.data import DataLoader

from tracktrain import Callback, Trainer
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.loggers import CSVLogger

from ._tasks import Classifier, make_loader


class _Batches(Callback):
    """The first input row of every batch each stage ran, by stage."""

    def __init__(self) -> None:
        self.seen: dict[str, list[list[float]]] = {"train": [], "val": [], "test": [], "predict": []}

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.seen["train"].append(batch[0][0].tolist())

    def on_validation_batch_start(self, trainer, module, batch, batch_idx):
        if not trainer.sanity_checking:  # the fit's validations only
            self.seen["val"].append(batch[0][0].tolist())

    def on_test_batch_start(self, trainer, module, batch, batch_idx):
        self.seen["test"].append(batch[0][0].tolist())

    def on_predict_batch_start(self, trainer, module, batch, batch_idx):
        self.seen["predict"].append(batch[0][0].tolist())


def _files(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(path, name), root) for path, _, names in os.walk(root) for name in names)


def test_fast_dev_run_runs_n_batches_of_each_stage_and_leaves_nothing_behind(tmp_path):
    # an earlier real run left a checkpoint: fast_dev_run neither resumes from it nor writes beside it
    Trainer(max_epochs=1, enable_progress_bar=False, loggers=False, default_root_dir=tmp_path / "run").fit(
        Classifier(), make_loader()
    )
    before = _files(tmp_path)
    batches = _Batches()
    trainer = Trainer(
        fast_dev_run=2,
        max_epochs=50,
        enable_progress_bar=False,
        default_root_dir=tmp_path / "run",
        resume="auto",
        loggers=[CSVLogger(save_dir=tmp_path / "csv")],
        callbacks=[batches, ModelCheckpoint(dirpath=tmp_path / "mine", every_n_train_steps=1)],
    )
    module = Classifier()
    trainer.fit(module, make_loader(), make_loader(n=32, seed=1))
    assert trainer.global_step == 2 and trainer.current_epoch == 1  # one epoch from scratch: not resumed at step 8
    trainer.test(module, make_loader(n=32, seed=2))
    trainer.predict(module, DataLoader(make_loader(n=32, seed=3).dataset.tensors[0], batch_size=8))
    assert {stage: len(rows) for stage, rows in batches.seen.items()} == {"train": 2, "val": 2, "test": 2, "predict": 2}
    assert _files(tmp_path) == before  # no checkpoint (not even the one given), no CSV run


def test_fast_dev_run_takes_true_or_a_number_of_batches():
    assert Trainer(fast_dev_run=True, enable_progress_bar=False).limits["fit"] == 1
    with pytest.raises(ValueError, match="fast_dev_run"):
        Trainer(fast_dev_run=-1)


def test_overfit_batches_trains_the_same_batches_in_order_every_epoch(tmp_path):
    batches = _Batches()
    trainer = Trainer(
        overfit_batches=2,
        max_epochs=30,
        enable_progress_bar=False,
        enable_checkpointing=False,
        loggers=False,
        default_root_dir=tmp_path,
        callbacks=[batches],
    )
    module = Classifier(lr=0.5)
    trainer.fit(module, make_loader(shuffle=True), make_loader(n=32, seed=1))
    first_two = [row.tolist() for row in make_loader().dataset.tensors[0][[0, 8]]]
    assert batches.seen["train"] == first_two * 30  # the loader's first two batches, unshuffled, every epoch
    assert len(batches.seen["val"]) == 2 * 30
    x, y = (torch.cat(parts) for parts in zip(*list(make_loader())[:2]))
    assert torch.nn.functional.cross_entropy(module(x), y) < 0.2  # it overfits them
