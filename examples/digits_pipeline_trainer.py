"""Train the digits MLP as a pipeline under the Trainer: a `PipelineModule` declares its stages and its loss, and
`PipelineStrategy` runs them on two ranks, each batch in micro-batches (checkpoints by stage, resumable).

    torchrun --standalone --nproc_per_node 2 examples/digits_pipeline_trainer.py --epochs 20
    torchrun --standalone --nproc_per_node 2 examples/digits_pipeline_trainer.py --schedule interleaved_1f1b

Every rank reads the same batches; the loss and accuracy of the last stage are logged on every rank. The same command
again resumes from the last checkpoint (`resume="auto"`). Runs offline: the digits ship inside scikit-learn.
"""

from __future__ import annotations

import argparse
from collections import OrderedDict

import torch
import torch.nn.functional as F
from digits_data import digits_loaders
from torch import nn
from torch.utils.data import DataLoader

from tracktrain import Callback, Trainer
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.engine.pipeline import SCHEDULES, split_stages
from tracktrain.trainer import PipelineModule
from tracktrain.trainer.strategies import PipelineStrategy


class DigitsPipeline(PipelineModule):
    def __init__(self, split_points: list[str], lr: float = 0.05) -> None:
        super().__init__()
        self.split_points, self.lr = split_points, lr
        layers = [("embed", nn.Linear(64, 128)), ("act", nn.ReLU()), ("hidden", nn.Linear(128, 128))]
        self.net = nn.Sequential(OrderedDict([*layers, ("act2", nn.ReLU()), ("head", nn.Linear(128, 10))]))

    def pipeline_stages(self) -> list[nn.Module]:
        return split_stages(self.net, self.split_points)

    def pipeline_loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output, target)

    def pipeline_metrics(self, output: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"accuracy": (output.argmax(dim=1) == target).float().mean()}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


class PrintEpoch(Callback):
    """One line per epoch on rank 0 (every rank has the same values)."""

    def on_train_epoch_end(self, trainer, module):
        if trainer.strategy.global_rank == 0:
            metrics = {name: float(value) for name, value in trainer.callback_metrics.items()}
            print(
                f"epoch {trainer.current_epoch + 1:3d}/{trainer.max_epochs}  train_loss {metrics['train_loss']:.4f}  "
                f"val_loss {metrics['val_loss']:.4f}  val_accuracy {metrics['val_accuracy']:.4f}",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--schedule", choices=sorted(SCHEDULES), default="1f1b")
    parser.add_argument("--root-dir", default="runs/digits_pipeline")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)  # the same initial weights on every rank: each keeps its stages
    train_loader, val_loader = digits_loaders(args.batch_size, args.seed)
    # every batch splits into equal micro-batches: the last, smaller one of an epoch is dropped
    train_loader = DataLoader(train_loader.dataset, batch_size=args.batch_size, shuffle=True, drop_last=True)
    split_points = ["hidden"] if args.schedule != "interleaved_1f1b" else ["act", "hidden", "act2"]
    checkpoints = ModelCheckpoint(monitor="val_accuracy", mode="max", save_last=True)
    trainer = Trainer(
        max_epochs=args.epochs,
        seed=args.seed,
        strategy=PipelineStrategy(num_microbatches=args.microbatches, schedule=args.schedule),
        default_root_dir=args.root_dir,
        callbacks=[checkpoints, PrintEpoch()],
        enable_progress_bar=False,
        resume="auto",
    )
    trainer.fit(DigitsPipeline(split_points), train_loader, val_loader)
    if trainer.strategy.global_rank == 0:
        print(f"best checkpoint {checkpoints.best_model_path}", flush=True)


if __name__ == "__main__":
    main()
