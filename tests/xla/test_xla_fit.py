"""The XLA path on the real torch_xla runtime (XLA:CPU with PJRT_DEVICE=CPU). These tests run only in the XLA
environment that scripts/test-xla.sh builds (torch 2.9 + torch_xla 2.9); elsewhere they are skipped."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

torch_xla = pytest.importorskip("torch_xla")

from tracktrain import Trainer  # noqa: E402
from tracktrain.callbacks import ModelCheckpoint  # noqa: E402
from tracktrain.engine import create_supervised_trainer  # noqa: E402

from ..trainer._tasks import Classifier, make_loader, quiet  # noqa: E402


class Recording(Classifier):
    def __init__(self):
        super().__init__(lr=0.2)
        self.devices: set[str] = set()
        self.dtypes: set[torch.dtype] = set()
        self.losses: list[float] = []

    def on_train_epoch_end(self):
        self.losses.append(float(self.trainer.callback_metrics["loss_epoch_mean"]))

    def train_step(self, batch, batch_idx):
        x, _ = batch
        self.devices.add(x.device.type)
        self.dtypes.add(self(x).dtype)
        loss = super().train_step(batch, batch_idx)
        self.log("loss_epoch_mean", loss, on_step=False, on_epoch=True)
        return loss


def _fit(tmp_path, **kwargs):
    module = Recording()
    trainer = Trainer(**quiet(tmp_path, strategy="xla", max_epochs=4, **kwargs))
    trainer.fit(module, make_loader(), make_loader(seed=1))
    return module, trainer, module.losses


def test_fit_on_the_xla_device_lowers_the_loss(tmp_path):
    module, trainer, losses = _fit(tmp_path)
    assert module.devices == {"xla"}
    assert next(module.parameters()).device.type == "xla"
    assert losses[-1] < losses[0]
    assert float(trainer.callback_metrics["val_loss"]) < 0.6
    assert trainer.global_step == 32


def test_bf16_autocast_on_xla(tmp_path):
    module, _, losses = _fit(tmp_path, precision="bf16-mixed")
    assert module.dtypes == {torch.bfloat16}
    assert losses[-1] < losses[0]


def test_checkpoint_saved_on_xla_loads_and_resumes(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=None)
    first = Recording()
    Trainer(**quiet(tmp_path, strategy="xla", max_epochs=2, callbacks=[checkpoint])).fit(first, make_loader())
    path = tmp_path / "ckpt" / "checkpoint_16.pt"
    assert path.exists()
    state = torch.load(path, map_location="cpu", weights_only=False)
    assert torch.equal(state["model"]["net.weight"], first.net.weight.detach().cpu())
    resumed = Recording()
    trainer = Trainer(**quiet(tmp_path, strategy="xla", max_epochs=3))
    trainer.fit(resumed, make_loader(), ckpt_path=path)
    assert trainer.global_step == 24 and trainer.train_engine.state.epoch == 3


def test_supervised_tpu_step(tmp_path):
    device = torch_xla.device() if hasattr(torch_xla, "device") else None
    model = nn.Linear(4, 2).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = create_supervised_trainer(model, optimizer, nn.CrossEntropyLoss(), device=device)
    state = trainer.run(make_loader(), max_epochs=2)
    assert state.iteration == 16 and os.environ.get("PJRT_DEVICE") == "CPU"
