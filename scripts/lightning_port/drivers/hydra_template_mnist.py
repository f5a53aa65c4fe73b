"""Drives lightning-hydra-template's MNISTLitModule and MNISTDataModule (its `src/`, copied beside this file by the
porter) as its `src/train.py` does with the default configs (`configs/model/mnist.yaml`, `configs/data/mnist.yaml`,
`configs/trainer/default.yaml`), without Hydra: the partial optimizer and scheduler, fit then test with
ckpt_path="best". Written for the porter; the module and datamodule are the template's."""

from functools import partial

import torch
from lightning import Trainer, seed_everything
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from src.data.mnist_datamodule import MNISTDataModule
from src.models.components.simple_dense_net import SimpleDenseNet
from src.models.mnist_module import MNISTLitModule

seed_everything(12345, workers=True)
data = MNISTDataModule(data_dir="data/", train_val_test_split=(256, 32, 32), batch_size=32)
net = SimpleDenseNet(input_size=784, lin1_size=64, lin2_size=128, lin3_size=64, output_size=10)
optimizer = partial(torch.optim.Adam, lr=0.001, weight_decay=0.0)
scheduler = partial(torch.optim.lr_scheduler.ReduceLROnPlateau, mode="min", factor=0.1, patience=10)
model = MNISTLitModule(net=net, optimizer=optimizer, scheduler=scheduler, compile=False)
callbacks = [
    ModelCheckpoint(
        dirpath="checkpoints",
        filename="epoch_{epoch:03d}",
        monitor="val/acc",
        mode="max",
        save_last=True,
        auto_insert_metric_name=False,
    ),
    EarlyStopping(monitor="val/acc", patience=100, mode="max"),
]
trainer = Trainer(
    default_root_dir=".",
    min_epochs=1,
    max_epochs=3,
    accelerator="cpu",
    devices=1,
    check_val_every_n_epoch=1,
    deterministic=False,
    callbacks=callbacks,
)
trainer.fit(model=model, datamodule=data)
print("train metrics", {k: float(v) for k, v in trainer.callback_metrics.items()})
trainer.test(model=model, datamodule=data, ckpt_path=trainer.checkpoint_callback.best_model_path)
