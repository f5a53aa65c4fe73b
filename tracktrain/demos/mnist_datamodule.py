"""MNIST for demos: `MNIST(...)`, torchvision's dataset, and `MNISTDataModule`, its train / validation / test
splits, as Lightning's `lightning.pytorch.demos.mnist_datamodule`.

torchvision is needed (`pip install "torchvision==0.28.0"`, the release built for `torch==2.13.0`); unlike
Lightning's demo there is no fallback to a copy hosted elsewhere: without torchvision `MNIST` raises an ImportError
saying so.
"""

from __future__ import annotations

import importlib
import importlib.util
import platform
import warnings
from collections.abc import Callable, Sized
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, random_split

from tracktrain.trainer import DataModule

__all__ = ["MNIST", "MNISTDataModule"]

_DATASETS_PATH = "./data"
# the split of the training images between train and validation (the seed Lightning's demo uses, whatever `seed` is)
_SPLIT_SEED = 42
_TORCHVISION_PIN = "torchvision==0.28.0"  # the release paired with torch==2.13.0, the build tracktrain pins


def _torchvision_available() -> bool:
    return importlib.util.find_spec("torchvision") is not None


def _torchvision_mnist() -> Callable[..., Dataset[Any]]:
    """`torchvision.datasets.MNIST`, or an ImportError that says how to get it."""
    try:
        datasets = importlib.import_module("torchvision.datasets")
    except ImportError as error:
        raise ImportError(
            "tracktrain.demos' MNIST is torchvision's (torchvision.datasets.MNIST), and torchvision could not be "
            f"imported ({error}). Install it pinned beside torch so that pip keeps this torch: "
            f'pip install "torch==2.13.0" "{_TORCHVISION_PIN}"'
        ) from error
    mnist: Callable[..., Dataset[Any]] = datasets.MNIST
    return mnist


def MNIST(*args: Any, **kwargs: Any) -> Dataset[Any]:
    """`torchvision.datasets.MNIST(*args, **kwargs)` (`root`, `train`, `transform`, `download`, ...).

    Raises ImportError, naming the install command, when torchvision is not installed.
    """
    return _torchvision_mnist()(*args, **kwargs)


class MNISTDataModule(DataModule):
    """MNIST's 60000 training images split into train and `val_split` validation images (the same split every
    time), and its 10000 test images; every loader drops its last partial batch, and only the train one shuffles.

    Args:
        data_dir: where the files are downloaded to and read from.
        val_split: how many training images go to validation.
        num_workers: the loaders' worker processes (0 on Windows, with a warning).
        normalize: besides `ToTensor`, normalise the pixels to [-1, 1] (mean 0.5, std 0.5).
        seed: kept as `self.seed`; as in Lightning's demo the split's generator is seeded with 42 whatever it is.
        batch_size: the loaders' batch size.
    """

    name = "mnist"

    def __init__(
        self,
        data_dir: str = _DATASETS_PATH,
        val_split: int = 5000,
        num_workers: int = 16,
        normalize: bool = False,
        seed: int = 42,
        batch_size: int = 32,
    ) -> None:
        super().__init__()
        if num_workers and platform.system() == "Windows":
            warnings.warn(
                f"num_workers={num_workers} was asked for on Windows, where worker processes are best avoided: "
                "using num_workers=0",
                stacklevel=2,
            )
            num_workers = 0
        self.data_dir = data_dir
        self.val_split = val_split
        self.num_workers = num_workers
        self.normalize = normalize
        self.seed = seed
        self.batch_size = batch_size

    @property
    def num_classes(self) -> int:
        """10 digits."""
        return 10

    def prepare_data(self) -> None:
        """Download the training and test files to `data_dir` (if they are not there)."""
        MNIST(self.data_dir, train=True, download=True)
        MNIST(self.data_dir, train=False, download=True)

    def _dataset(self, train: bool) -> Dataset[Any]:
        transform = self.default_transforms
        extra = {"transform": transform} if transform else {}
        return MNIST(self.data_dir, train=train, download=False, **extra)

    def setup(self, stage: str) -> None:
        """Split the training images into `dataset_train` and `dataset_val` (whatever `stage`)."""
        full = self._dataset(train=True)
        assert isinstance(full, Sized)
        lengths = [len(full) - self.val_split, self.val_split]
        self.dataset_train, self.dataset_val = random_split(
            full, lengths, generator=torch.Generator().manual_seed(_SPLIT_SEED)
        )

    def _loader(self, dataset: Dataset[Any], shuffle: bool) -> DataLoader[Any]:
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            drop_last=True,
            pin_memory=True,
        )

    def train_dataloader(self) -> DataLoader[Any]:
        """The training images less the validation ones, shuffled."""
        return self._loader(self.dataset_train, shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        """The `val_split` validation images, in order."""
        return self._loader(self.dataset_val, shuffle=False)

    def test_dataloader(self) -> DataLoader[Any]:
        """The test images, in order."""
        return self._loader(self._dataset(train=False), shuffle=False)

    @property
    def default_transforms(self) -> Callable[..., Any] | None:
        """torchvision's `ToTensor` (then `Normalize((0.5,), (0.5,))` with `normalize`); None without
        torchvision."""
        if not _torchvision_available():
            return None
        transforms = importlib.import_module("torchvision.transforms")
        if not self.normalize:
            to_tensor: Callable[..., Any] = transforms.ToTensor()
            return to_tensor
        composed: Callable[..., Any] = transforms.Compose(
            [transforms.ToTensor(), transforms.Normalize(mean=(0.5,), std=(0.5,))]
        )
        return composed
