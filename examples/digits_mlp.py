"""Train an MLP on scikit-learn's bundled digits dataset with a LoopModule and the Trainer.

The README's main job: a real training run on the embedded defaults (checkpoints on local disk under
--root-dir), printing per-epoch loss and accuracy. Runs offline: the digits data ships inside scikit-learn.

    python examples/digits_mlp.py --epochs 30
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from digits_data import digits_loaders
from torch import nn

from tracktrain import Callback, LoopModule, Trainer
from tracktrain.callbacks import ModelCheckpoint


class DigitsClassifier(LoopModule):
    def __init__(self, lr: float = 0.05, hidden: int = 128) -> None:
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Dropout(0.1), nn.Linear(hidden, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def train_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        return loss

    def eval_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), prog_bar=True)
        self.log("val_accuracy", (logits.argmax(dim=1) == y).float().mean(), prog_bar=True)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=self.trainer.max_epochs)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"}}


class PrintEpoch(Callback):
    """One line per epoch, after validation (values are read from the device only here)."""

    def on_train_epoch_end(self, trainer, module):
        metrics = {name: float(value) for name, value in trainer.callback_metrics.items()}
        print(
            f"epoch {trainer.current_epoch + 1:3d}/{trainer.max_epochs}  train_loss {metrics['train_loss_epoch']:.4f}  "
            f"val_loss {metrics['val_loss']:.4f}  val_accuracy {metrics['val_accuracy']:.4f}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root-dir", default="runs/digits", help="where checkpoints go (a path or fsspec URL)")
    args = parser.parse_args()

    train_loader, val_loader = digits_loaders(args.batch_size, args.seed)
    trainer = Trainer(
        max_epochs=args.epochs,
        seed=args.seed,
        default_root_dir=args.root_dir,
        callbacks=[PrintEpoch(), ModelCheckpoint(monitor="val_accuracy", mode="max", save_last=True)],
    )
    trainer.fit(DigitsClassifier(lr=args.lr), train_loader, val_loader)
    checkpoint = next(c for c in trainer.callbacks if isinstance(c, ModelCheckpoint))
    print(
        f"done: {trainer.global_step} steps, final val_accuracy {float(trainer.callback_metrics['val_accuracy']):.4f}, "
        f"best checkpoint {checkpoint.best_model_path}"
    )


if __name__ == "__main__":
    main()
