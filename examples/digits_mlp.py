"""Train an MLP on scikit-learn's bundled digits dataset with tracktrain's Engine.

The main job of the README until the LoopModule/Trainer exists: a real training run built from
`create_supervised_trainer` / `create_supervised_evaluator`, printing per-epoch loss and accuracy.
Runs offline: the digits data ships inside scikit-learn.

    python examples/digits_mlp.py --epochs 20
"""

from __future__ import annotations

import argparse

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tracktrain.engine import Events, create_supervised_evaluator, create_supervised_trainer


def digits_loaders(batch_size: int, seed: int) -> tuple[DataLoader, DataLoader]:
    features, labels = load_digits(return_X_y=True)
    x_train, x_val, y_train, y_val = train_test_split(
        features, labels, test_size=0.2, random_state=seed, stratify=labels
    )

    def dataset(x, y):
        # pixels are 0..16; a fixed scale, because some border pixels are constant in one split
        return TensorDataset(torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y, dtype=torch.long))

    generator = torch.Generator().manual_seed(seed)
    train = DataLoader(dataset(x_train, y_train), batch_size=batch_size, shuffle=True, generator=generator)
    val = DataLoader(dataset(x_val, y_val), batch_size=256)
    return train, val


class EpochAccumulator:
    """Sums a per-batch quantity on the device and reads it once per epoch (one host sync per epoch)."""

    def __init__(self) -> None:
        self.total = torch.zeros(())
        self.count = 0

    def reset(self) -> None:
        self.total = torch.zeros(())
        self.count = 0

    def add(self, value: torch.Tensor, count: int) -> None:
        self.total += value
        self.count += count

    def mean(self) -> float:
        return self.total.item() / max(self.count, 1)


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
    evaluator = create_supervised_evaluator(model)

    train_loss = EpochAccumulator()
    trainer.add_event_handler(Events.EPOCH_STARTED, train_loss.reset)

    @trainer.on(Events.ITERATION_COMPLETED)
    def accumulate_loss(engine):
        batch_size = len(engine.state.batch[1])
        train_loss.add(engine.state.output * batch_size, batch_size)

    val_correct, val_loss = EpochAccumulator(), EpochAccumulator()

    @evaluator.on(Events.STARTED)
    def reset_validation(engine):
        val_correct.reset()
        val_loss.reset()

    @evaluator.on(Events.ITERATION_COMPLETED)
    def accumulate_validation(engine):
        y_pred, y = engine.state.output
        val_correct.add((y_pred.argmax(dim=1) == y).sum(), len(y))
        val_loss.add(loss_fn(y_pred, y) * len(y), len(y))

    @trainer.on(Events.EPOCH_COMPLETED)
    def validate(engine):
        evaluator.run(val_loader)
        engine.state.metrics = {"val_accuracy": val_correct.mean(), "val_loss": val_loss.mean()}
        print(
            f"epoch {engine.state.epoch:3d}/{engine.state.max_epochs}  train_loss {train_loss.mean():.4f}  "
            f"val_loss {val_loss.mean():.4f}  val_accuracy {val_correct.mean():.4f}",
            flush=True,
        )

    state = trainer.run(train_loader, max_epochs=args.epochs)
    print(
        f"done: {state.iteration} iterations in {state.times['COMPLETED']:.1f}s, "
        f"final val_accuracy {state.metrics['val_accuracy']:.4f}"
    )


if __name__ == "__main__":
    main()
