"""Synthetic datasets with torchvision's classes, shapes and attributes (`data`, `targets`, `classes`): each image
is a class-dependent pattern plus noise, so a model learns something. Their size: IGNITE_PORT_SAMPLES (train), at most
the real training set's size, and a quarter of it (test) — the real test set's size when the training set has its
real size (e.g. CIFAR10's 50000 and 10000, so a program's `random_split` of the real sizes adds up)."""

from __future__ import annotations

import os

import numpy as np
import torch
from PIL import Image

__all__ = [
    "CIFAR10",
    "CIFAR100",
    "MNIST",
    "STL10",
    "SVHN",
    "Caltech101",
    "FakeData",
    "FashionMNIST",
    "ImageFolder",
    "LSUN",
]

# the real (training, test) sizes
_SIZES = {
    "MNIST": (60000, 10000),
    "FashionMNIST": (60000, 10000),
    "CIFAR10": (50000, 10000),
    "CIFAR100": (50000, 10000),
    "SVHN": (73257, 26032),
    "STL10": (5000, 8000),
}


def _count(train: bool, name: str = "") -> int:
    samples = int(os.environ.get("IGNITE_PORT_SAMPLES", "512"))
    real = _SIZES.get(name)
    if real is not None:
        samples = min(samples, real[0])
        if samples == real[0]:
            return real[0] if train else real[1]
    return samples if train else max(samples // 4, 8)


def _images(
    name: str, train: bool, count: int, shape: tuple[int, ...], classes: int, balanced: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """`balanced`: each class count // classes times when count is a multiple of classes (CIFAR's and STL10's classes
    are exactly balanced; programs reshape their sorted labels by class)."""
    rng = np.random.default_rng(sum(map(ord, name)) * 2 + int(train))
    targets = rng.integers(0, classes, size=count)
    if balanced and count % classes == 0:
        order = np.random.default_rng(sum(map(ord, name)) * 2 + int(train) + 1000)
        targets = order.permutation(np.arange(count) % classes)
    patterns = rng.random((classes, *shape))
    noise = rng.random((count, *shape))
    images = (0.6 * patterns[targets] + 0.4 * noise) * 255
    return images.astype(np.uint8), targets


class _Synthetic(torch.utils.data.Dataset):
    shape: tuple[int, ...] = (28, 28)
    num_classes = 10
    mode = "L"
    balanced = False

    def __init__(self, root=None, train=True, download=False, transform=None, target_transform=None, **kwargs):
        self.root, self.train, self.transform, self.target_transform = root, train, transform, target_transform
        name = type(self).__name__
        images, targets = _images(name, train, _count(train, name), self.shape, self.num_classes, self.balanced)
        self._set(images, targets)
        self.classes = [f"class {i}" for i in range(self.num_classes)]
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}

    def _set(self, images, targets):
        self.data = images
        self.targets = [int(t) for t in targets]

    def __len__(self):
        return len(self.data)

    def _image(self, index):
        return Image.fromarray(np.asarray(self.data[index]), mode=self.mode)

    def __getitem__(self, index):
        image, target = self._image(index), self.targets[index]
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target


class MNIST(_Synthetic):
    def _set(self, images, targets):
        self.data = torch.from_numpy(images)
        self.targets = torch.from_numpy(targets)

    def _image(self, index):
        return Image.fromarray(self.data[index].numpy(), mode="L")

    def __getitem__(self, index):
        image, target = self._image(index), int(self.targets[index])
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target


class FashionMNIST(MNIST):
    pass


class CIFAR10(_Synthetic):
    shape = (32, 32, 3)
    mode = "RGB"
    balanced = True


class CIFAR100(CIFAR10):
    num_classes = 100


class Caltech101(_Synthetic):
    shape = (300, 300, 3)
    num_classes = 101
    mode = "RGB"

    def __init__(self, root=None, target_type="category", transform=None, target_transform=None, download=False):
        super().__init__(root, True, download, transform, target_transform)


class ImageFolder(CIFAR10):
    shape = (64, 64, 3)
    balanced = False

    def __init__(self, root=None, transform=None, target_transform=None, **kwargs):
        super().__init__(root, True, False, transform, target_transform)


class LSUN(ImageFolder):
    def __init__(self, root=None, classes="train", transform=None, target_transform=None):
        super().__init__(root, transform, target_transform)


class FakeData(_Synthetic):
    def __init__(
        self,
        size=1000,
        image_size=(3, 224, 224),
        num_classes=10,
        transform=None,
        target_transform=None,
        random_offset=0,
    ):
        self.shape = (image_size[1], image_size[2], image_size[0])
        self.num_classes = num_classes
        self.transform, self.target_transform = transform, target_transform
        images, targets = _images("FakeData", True, size, self.shape, num_classes)
        self._set(images, targets)
        self.classes = [str(i) for i in range(num_classes)]
        self.mode = "RGB"


class SVHN(_Synthetic):
    """torchvision's: `split` "train" / "test" / "extra", `data` an (N, 3, 32, 32) uint8 array, `labels`."""

    shape = (32, 32, 3)
    mode = "RGB"

    def __init__(self, root=None, split="train", transform=None, target_transform=None, download=False):
        self.root, self.split, self.transform, self.target_transform = root, split, transform, target_transform
        train = split != "test"
        name = type(self).__name__
        key = name + ("" if split == "train" else split)
        images, targets = _images(key, train, _count(train, name), self.shape, 10, isinstance(self, STL10))
        self.data = np.ascontiguousarray(images.transpose(0, 3, 1, 2))
        self.labels = targets.astype(np.int64)
        self.classes = [str(i) for i in range(10)]

    def _image(self, index):
        return Image.fromarray(np.transpose(self.data[index], (1, 2, 0)), mode="RGB")

    def __getitem__(self, index):
        image, target = self._image(index), int(self.labels[index])
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target


class STL10(SVHN):
    """torchvision's: `split` "train" / "test" / "unlabeled", (N, 3, 96, 96) images; the unlabeled ones have label
    -1."""

    shape = (96, 96, 3)

    def __init__(self, root=None, split="train", folds=None, transform=None, target_transform=None, download=False):
        super().__init__(root, split, transform, target_transform, download)
        if split == "unlabeled":
            self.labels[:] = -1
        self.classes = ["airplane", "bird", "car", "cat", "deer", "dog", "horse", "monkey", "ship", "truck"]
