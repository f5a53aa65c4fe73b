"""A user moving from Lightning keeps their trained models: a `.ckpt` Lightning 2.6 saved loads with
`MyModule.load_from_checkpoint` (its weights and `hyper_parameters`) and predicts what Lightning's module predicts,
`trainer.test(ckpt_path=...)` reads it, and `fit(ckpt_path=...)` resumes it — weights, optimizer and scheduler states,
global step and epoch — training on as Lightning's own resume does."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tracktrain import LoopModule, Trainer

from ..trainer._tasks import make_loader, quiet

L = pytest.importorskip("lightning.pytorch")


class LitClassifier(L.LightningModule):
    def __init__(self, lr: float = 0.05, hidden: int = 8) -> None:
        super().__init__()
        self.save_hyperparameters()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, 2))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        return F.cross_entropy(self(batch[0]), batch[1])

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)}


class Ported(LoopModule):  # the same module after the renames
    def __init__(self, lr: float = 0.05, hidden: int = 8) -> None:
        super().__init__()
        self.save_hyperparameters()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, 2))

    def forward(self, x):
        return self.net(x)

    def train_step(self, batch, batch_idx):
        return F.cross_entropy(self(batch[0]), batch[1])

    def eval_step(self, batch, batch_idx):
        self.log("test_loss", F.cross_entropy(self(batch[0]), batch[1]))

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)}


def lightning_trainer(root, max_epochs, **options):
    return L.Trainer(
        max_epochs=max_epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=root, **options,
    )  # fmt: skip


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Lightning's checkpoints of a 2-epoch fit (one at each epoch's end, by its ModelCheckpoint), and its module."""
    root = tmp_path_factory.mktemp("lightning")
    checkpoint = L.callbacks.ModelCheckpoint(dirpath=root / "ckpt", save_top_k=-1, filename="{epoch}")
    module = LitClassifier(lr=0.02, hidden=6)
    lightning_trainer(root, 2, callbacks=[checkpoint]).fit(module, make_loader())
    return root / "ckpt", module


def test_a_lightning_checkpoint_loads_with_its_hparams_and_predicts_the_same(saved):
    directory, theirs = saved
    ours = Ported.load_from_checkpoint(directory / "epoch=1.ckpt")
    assert ours.hparams == {"lr": 0.02, "hidden": 6} and not ours.training
    x = torch.randn(5, 4)
    assert torch.equal(ours(x), theirs.eval()(x))
    (tested,) = Trainer(enable_progress_bar=False, loggers=False).test(
        Ported(lr=0.02, hidden=6), make_loader(), ckpt_path=str(directory / "epoch=1.ckpt"), verbose=False
    )
    expected = F.cross_entropy(theirs(make_loader().dataset.tensors[0]), make_loader().dataset.tensors[1])
    assert tested["test_loss"] == pytest.approx(float(expected), rel=1e-5)


def test_fit_resumes_a_lightning_checkpoint_and_trains_on_as_lightnings_resume(saved, tmp_path):
    directory, _ = saved
    continued = LitClassifier(lr=0.02, hidden=6)
    lightning_trainer(tmp_path / "theirs", 4, enable_checkpointing=False).fit(
        continued, make_loader(), ckpt_path=str(directory / "epoch=0.ckpt")
    )
    ours = Ported(lr=0.02, hidden=6)
    trainer = Trainer(**quiet(tmp_path / "ours", max_epochs=4))
    trainer.fit(ours, make_loader(), ckpt_path=str(directory / "epoch=0.ckpt"))  # saved after epoch 0: 8 steps
    assert trainer.global_step == 32 and trainer.current_epoch == 4
    assert ours.optimizers().param_groups[0]["lr"] == pytest.approx(0.02 * 0.5**4)  # the scheduler went on
    for mine, theirs in zip(ours.parameters(), continued.parameters()):
        assert torch.allclose(mine, theirs, atol=1e-6)
