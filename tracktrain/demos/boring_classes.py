"""Small random datasets and tiny modules for trying the Trainer out and for tests: Lightning's
`lightning.pytorch.demos.boring_classes` under tracktrain's names (`train_step`, `eval_step`).

With the same seed each class builds the same layers, draws the same data and trains the same way as Lightning's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.optim.lr_scheduler import LRScheduler
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset

from tracktrain.trainer import DataModule, LoopModule

__all__ = [
    "BoringDataModule",
    "BoringDataModuleNoLen",
    "BoringModel",
    "DemoModel",
    "IterableBoringDataModule",
    "ManualOptimBoringModel",
    "Net",
    "RandomDataset",
    "RandomDictDataset",
    "RandomIterableDataset",
    "RandomIterableDatasetWithLen",
]


class RandomDictDataset(Dataset[dict[str, Tensor]]):
    """`length` random vectors of `size` features (drawn once, from torch's global generator), each given as
    `{"a": x, "b": x + 2}`. For tests and experiments."""

    def __init__(self, size: int, length: int) -> None:
        self.len = length
        self.data = torch.randn(length, size)

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        row = self.data[index]
        return {"a": row, "b": row + 2}

    def __len__(self) -> int:
        return self.len


class RandomDataset(Dataset[Tensor]):
    """`length` random vectors of `size` features, drawn once from torch's global generator when it is built. For
    tests and experiments."""

    def __init__(self, size: int, length: int) -> None:
        self.len = length
        self.data = torch.randn(length, size)

    def __getitem__(self, index: int) -> Tensor:
        return self.data[index]

    def __len__(self) -> int:
        return self.len


class RandomIterableDataset(IterableDataset[Tensor]):
    """An iterable dataset without a length: each pass yields `count` fresh random vectors of `size` features."""

    def __init__(self, size: int, count: int) -> None:
        self.count = count
        self.size = size

    def __iter__(self) -> Iterator[Tensor]:
        for _ in range(self.count):
            yield torch.randn(self.size)


class RandomIterableDatasetWithLen(IterableDataset[Tensor]):
    """`RandomIterableDataset` that also tells its length (`count`)."""

    def __init__(self, size: int, count: int) -> None:
        self.count = count
        self.size = size

    def __iter__(self) -> Iterator[Tensor]:
        for _ in range(len(self)):
            yield torch.randn(self.size)

    def __len__(self) -> int:
        return self.count


def _random_loader() -> DataLoader[Tensor]:
    """What each of BoringModel's `*_dataloader()` gives: 64 new random vectors of 32 features, one per batch."""
    return DataLoader(RandomDataset(32, 64))


class BoringModel(LoopModule):
    """A one-layer module (`Linear(32, 2)`) that trains on random data towards ones: subclass it and override the
    part a test is about.

    .. code-block:: python

        class LoggingModel(BoringModel):
            def train_step(self, batch, batch_idx):
                loss = self.step(batch)
                self.log("loss", loss)
                return loss


        Trainer(max_steps=5).fit(LoggingModel())

    Its loss is the mean squared error to ones; SGD at lr 0.1 with a StepLR that divides the rate by 10 each epoch;
    every `*_dataloader()` gives 64 random vectors, one per batch.
    """

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(32, 2)

    def forward(self, x: Tensor) -> Tensor:
        """The layer applied to `x` (`(..., 32)` -> `(..., 2)`)."""
        return self.layer(x)

    def loss(self, preds: Tensor, labels: Tensor | None = None) -> Tensor:
        """Mean squared error of `preds` to `labels` (by default ones: any target that moves the weights will do)."""
        target = torch.ones_like(preds) if labels is None else labels
        return F.mse_loss(preds, target)

    def step(self, batch: Any) -> Tensor:
        """The loss of the model's output on `batch`."""
        return self.loss(self(batch))

    def train_step(self, batch: Any, batch_idx: int) -> Tensor | Mapping[str, Any]:
        """`{"loss": ...}` of the batch."""
        return {"loss": self.step(batch)}

    def eval_step(self, batch: Any, batch_idx: int) -> Any:
        """`{"x": loss}` of the batch."""
        return {"x": self.step(batch)}

    def test_step(self, batch: Any, batch_idx: int) -> Any:
        """`{"y": loss}` of the batch."""
        return {"y": self.step(batch)}

    def configure_optimizers(self) -> tuple[list[torch.optim.Optimizer], list[LRScheduler]]:
        """SGD (lr 0.1) and a StepLR of step 1 (the rate times 0.1 after each epoch)."""
        sgd = torch.optim.SGD(self.parameters(), lr=0.1)
        return [sgd], [torch.optim.lr_scheduler.StepLR(sgd, step_size=1)]

    def train_dataloader(self) -> DataLoader[Tensor]:
        """64 random vectors, batch size 1."""
        return _random_loader()

    def val_dataloader(self) -> DataLoader[Tensor]:
        """64 random vectors, batch size 1."""
        return _random_loader()

    def test_dataloader(self) -> DataLoader[Tensor]:
        """64 random vectors, batch size 1."""
        return _random_loader()

    def predict_dataloader(self) -> DataLoader[Tensor]:
        """64 random vectors, batch size 1."""
        return _random_loader()


class BoringDataModule(DataModule):
    """One `RandomDataset(32, 256)` cut in four consecutive quarters of 64: train, validation, test and predict
    (made by `setup` for the stages that read them), each read one item per batch."""

    def __init__(self) -> None:
        super().__init__()
        self.random_full = RandomDataset(32, 64 * 4)

    def setup(self, stage: str) -> None:
        """Cut the quarters `stage` needs: "fit" train and validation, "validate" validation, "test", "predict"."""
        quarter = 64
        if stage == "fit":
            self.random_train = Subset(self.random_full, indices=range(quarter))
        if stage in ("fit", "validate"):
            self.random_val = Subset(self.random_full, indices=range(quarter, 2 * quarter))
        if stage == "test":
            self.random_test = Subset(self.random_full, indices=range(2 * quarter, 3 * quarter))
        if stage == "predict":
            self.random_predict = Subset(self.random_full, indices=range(3 * quarter, 4 * quarter))

    def train_dataloader(self) -> DataLoader[Tensor]:
        """The first quarter."""
        return DataLoader(self.random_train)

    def val_dataloader(self) -> DataLoader[Tensor]:
        """The second quarter."""
        return DataLoader(self.random_val)

    def test_dataloader(self) -> DataLoader[Tensor]:
        """The third quarter."""
        return DataLoader(self.random_test)

    def predict_dataloader(self) -> DataLoader[Tensor]:
        """The last quarter."""
        return DataLoader(self.random_predict)


class BoringDataModuleNoLen(DataModule):
    """Loaders without a length: `RandomIterableDataset`s of 512 (train), 128 (validation), 256 (test) and 64
    (predict) vectors of 32 features."""

    def setup(self, stage: str) -> None:
        """Make the datasets of `stage` (with "fit": train and validation)."""
        if stage == "fit":
            self.random_train = RandomIterableDataset(32, 512)
        if stage in ("fit", "validate"):
            self.random_val = RandomIterableDataset(32, 128)
        if stage == "test":
            self.random_test = RandomIterableDataset(32, 256)
        if stage == "predict":
            self.random_predict = RandomIterableDataset(32, 64)

    def train_dataloader(self) -> DataLoader[Tensor]:
        """512 random vectors, no length."""
        return DataLoader(self.random_train)

    def val_dataloader(self) -> DataLoader[Tensor]:
        """128 random vectors, no length."""
        return DataLoader(self.random_val)

    def test_dataloader(self) -> DataLoader[Tensor]:
        """256 random vectors, no length."""
        return DataLoader(self.random_test)

    def predict_dataloader(self) -> DataLoader[Tensor]:
        """64 random vectors, no length."""
        return DataLoader(self.random_predict)


class IterableBoringDataModule(DataModule):
    """Two loaders per stage, one with a length and one without: a `RandomDataset` and a `RandomIterableDataset` of
    4 features each, 16 items for training, 32 for validation, 64 for testing and 128 for prediction."""

    def setup(self, stage: str) -> None:
        """Make the two datasets of `stage` (with "fit": the validation ones too), in that order."""

        def pair(count: int) -> list[Dataset[Tensor]]:
            return [RandomDataset(4, count), RandomIterableDataset(4, count)]

        if stage == "fit":
            self.train_datasets = pair(16)
        if stage in ("fit", "validate"):
            self.val_datasets = pair(32)
        if stage == "test":
            self.test_datasets = pair(64)
        if stage == "predict":
            self.predict_datasets = pair(128)

    def train_dataloader(self) -> list[DataLoader[Tensor]]:
        """A loader over each training dataset."""
        return [DataLoader(dataset) for dataset in self.train_datasets]

    def val_dataloader(self) -> list[DataLoader[Tensor]]:
        """A loader over each validation dataset."""
        return [DataLoader(dataset) for dataset in self.val_datasets]

    def test_dataloader(self) -> list[DataLoader[Tensor]]:
        """A loader over each test dataset."""
        return [DataLoader(dataset) for dataset in self.test_datasets]

    def predict_dataloader(self) -> list[DataLoader[Tensor]]:
        """A loader over each prediction dataset."""
        return [DataLoader(dataset) for dataset in self.predict_datasets]


class ManualOptimBoringModel(BoringModel):
    """`BoringModel` under manual optimization: `train_step` zeroes, backpropagates and steps the optimizer itself
    (its StepLR is not stepped, as under Lightning)."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def train_step(self, batch: Any, batch_idx: int) -> Tensor:
        """One SGD step on the batch's loss, which it returns."""
        optimizer = self.optimizers()
        loss = self.step(batch)
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        return loss


class DemoModel(LoopModule):
    """`Linear(32, out_dim)` and a ReLU, trained with Adam to minimise the sum of its outputs (inputs are flattened
    to `(batch, 32)`)."""

    def __init__(self, out_dim: int = 10, learning_rate: float = 0.02) -> None:
        super().__init__()
        self.l1 = nn.Linear(32, out_dim)
        self.learning_rate = learning_rate

    def forward(self, x: Tensor) -> Tensor:
        """ReLU of the layer on `x` flattened per sample."""
        return torch.relu(self.l1(x.view(x.size(0), -1)))

    def train_step(self, batch: Any, batch_idx: int) -> Tensor:
        """The sum of the outputs on the batch."""
        return self(batch).sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """Adam at `learning_rate`."""
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)


class Net(nn.Module):
    """PyTorch's MNIST example network: two convolutions, max pooling, dropout and two linear layers, giving the
    log-probabilities of 10 classes for `(batch, 1, 28, 28)` images."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: Tensor) -> Tensor:
        """Log-softmax over the 10 classes."""
        features = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        features = torch.flatten(self.dropout1(features), 1)
        hidden = self.dropout2(F.relu(self.fc1(features)))
        return F.log_softmax(self.fc2(hidden), dim=1)
