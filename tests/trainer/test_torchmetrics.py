"""`self.log(name, metric)` with a TorchMetrics metric: per step the batch's value (its last forward), per epoch its
`compute()` over every batch of the epoch (not a mean of batch values), reset for the next epoch; under DDP the
metric's state is synced across the ranks by TorchMetrics, so every rank logs the value over the whole loader."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tracktrain import LoopModule, Trainer
from tracktrain.distributed.collectives import spawn

from ._ddp import load_per_rank as _load
from ._ddp import save_per_rank as _save

torchmetrics = pytest.importorskip("torchmetrics")


def _data(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, (x[:, 0] > 0.3).long() + (x[:, 1] > 0.8).long())  # 3 unbalanced classes


class Metered(LoopModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Linear(4, 3)
        # macro accuracy over the epoch differs from the mean of the batches' macro accuracies: what compute() adds
        self.train_accuracy = torchmetrics.classification.MulticlassAccuracy(num_classes=3, average="macro")
        self.val_accuracy = torchmetrics.classification.MulticlassAccuracy(num_classes=3, average="macro")
        self.seen: list[tuple[torch.Tensor, torch.Tensor, float]] = []  # each training batch: logits, labels, value

    def train_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        value = float(self.train_accuracy(logits, y))  # forward: updates the state, returns the batch's value
        self.seen.append((logits.detach(), y, value))
        self.log("train_accuracy", self.train_accuracy, on_step=True, on_epoch=True)
        return F.cross_entropy(logits, y)

    def eval_step(self, batch, batch_idx):
        x, y = batch
        self.val_accuracy.update(self.net(x), y)
        self.log("val_accuracy", self.val_accuracy)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def on_train_epoch_end(self):
        self.epochs = [*getattr(self, "epochs", []), dict(self.trainer.callback_metrics)]


def _macro_accuracy(net: nn.Module, dataset: TensorDataset) -> float:
    x, y = dataset.tensors
    predicted = net(x).argmax(dim=1)
    return sum(float((predicted[y == c] == c).float().mean()) for c in range(3)) / 3


def _computed_over(batches) -> float:
    metric = torchmetrics.classification.MulticlassAccuracy(num_classes=3, average="macro")
    for logits, labels, _ in batches:
        metric.update(logits, labels)
    return float(metric.compute())


def _trainer(root, **options) -> Trainer:
    return Trainer(
        max_epochs=2,
        enable_progress_bar=False,
        enable_checkpointing=False,
        loggers=False,
        default_root_dir=root,
        **options,
    )


def test_a_logged_metric_gives_the_batch_value_per_step_and_computes_over_the_epoch(tmp_path):
    module = Metered()
    trainer = _trainer(tmp_path)
    train, val = _data(60, 0), _data(50, 1)
    trainer.fit(module, DataLoader(train, batch_size=16), DataLoader(val, batch_size=16))
    first, second = module.seen[:4], module.seen[4:]
    # per step: the batch's value (the epoch's last batch's, at its end)
    assert float(module.epochs[0]["train_accuracy_step"]) == first[-1][2]
    # per epoch: compute() over the epoch's batches, reset between epochs (epoch 2 alone, not 1 and 2)
    assert float(module.epochs[1]["train_accuracy_epoch"]) == pytest.approx(_computed_over(second))
    assert _computed_over(second) != pytest.approx(_computed_over(first + second), abs=1e-4)
    assert _computed_over(second) != pytest.approx(sum(value for *_, value in second) / 4, abs=1e-4)
    # validation: the value over all 50 samples, with the weights it ran with
    assert float(trainer.callback_metrics["val_accuracy"]) == pytest.approx(_macro_accuracy(module.net, val))


def _fit_ddp(out: str) -> None:
    module = Metered()
    trainer = _trainer(out, strategy="ddp")
    trainer.fit(module, DataLoader(_data(64, 0), batch_size=8), DataLoader(_data(50, 1), batch_size=10))
    _save(out, "val_accuracy", float(trainer.callback_metrics["val_accuracy"]))
    _save(out, "weights", [value.tolist() for value in module.net.state_dict().values()])


@pytest.mark.distributed
def test_under_ddp_every_rank_logs_the_metric_over_the_whole_loader(tmp_path):
    spawn(_fit_ddp, 2, args=(str(tmp_path),))
    accuracies = _load(tmp_path, "val_accuracy")
    assert accuracies[0] == accuracies[1]  # each rank saw half of the batches: the state was synced
    net = nn.Linear(4, 3)
    net.load_state_dict(
        {key: torch.tensor(value) for key, value in zip(("weight", "bias"), _load(tmp_path, "weights")[0])}
    )
    assert accuracies[0] == pytest.approx(_macro_accuracy(net, _data(50, 1)))
