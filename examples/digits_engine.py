"""Train an MLP on scikit-learn's bundled digits dataset with tracktrain's Engine.

The same task as digits_mlp.py on the bare Engine (the Ignite-style API): a training run built from
`create_supervised_trainer` / `create_supervised_evaluator`, printing per-epoch loss and accuracy.
Runs offline: the digits data ships inside scikit-learn.

    python examples/digits_engine.py --epochs 20
"""

from __future__ import annotations

import argparse

import torch
from digits_data import digits_loaders
from torch import nn

from tracktrain.engine import Events, create_supervised_evaluator, create_supervised_trainer
from tracktrain.handlers import ProgressBar
from tracktrain.metrics import Accuracy, Average, Loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    train_loader, val_loader = digits_loaders(args.batch_size, args.seed)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    trainer = create_supervised_trainer(model, optimizer, loss_fn)
    evaluator = create_supervised_evaluator(model, metrics={"val_accuracy": Accuracy(), "val_loss": Loss(loss_fn)})
    # the epoch's mean training loss, accumulated on the device and read once per epoch
    Average(output_transform=lambda loss: loss).attach(trainer, "train_loss")
    # a bar on a terminal (nothing when the output is piped to a file)
    ProgressBar(persist=False).attach(trainer, metric_names=["train_loss"])

    @trainer.on(Events.EPOCH_COMPLETED)
    def validate(engine):
        metrics = evaluator.run(val_loader).metrics
        engine.state.metrics.update(metrics)
        print(
            f"epoch {engine.state.epoch:3d}/{engine.state.max_epochs}  "
            f"train_loss {float(engine.state.metrics['train_loss']):.4f}  "
            f"val_loss {metrics['val_loss']:.4f}  val_accuracy {metrics['val_accuracy']:.4f}",
            flush=True,
        )

    state = trainer.run(train_loader, max_epochs=args.epochs)
    print(
        f"done: {state.iteration} iterations in {state.times['COMPLETED']:.1f}s, "
        f"final val_accuracy {state.metrics['val_accuracy']:.4f}"
    )


if __name__ == "__main__":
    main()
