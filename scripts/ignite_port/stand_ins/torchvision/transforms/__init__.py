"""The transforms the Ignite examples use, on PIL images and tensors (random ones draw from torch's generator)."""

from __future__ import annotations

import numbers

import torch

from torchvision.transforms import functional as F

__all__ = [
    "CenterCrop",
    "ColorJitter",
    "Compose",
    "Grayscale",
    "Lambda",
    "Normalize",
    "Pad",
    "RandomCrop",
    "RandomErasing",
    "RandomHorizontalFlip",
    "Resize",
    "ToPILImage",
    "ToTensor",
]


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, image):
        for transform in self.transforms:
            image = transform(image)
        return image


class ToTensor:
    def __call__(self, image):
        return F.to_tensor(image)


class ToPILImage:
    def __call__(self, tensor):
        return F.to_pil_image(tensor)


class Lambda:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, image):
        return self.fn(image)


class Normalize:
    def __init__(self, mean, std, inplace=False):
        self.mean, self.std = mean, std

    def __call__(self, tensor):
        mean = torch.as_tensor(self.mean, dtype=tensor.dtype).reshape(-1, 1, 1)
        std = torch.as_tensor(self.std, dtype=tensor.dtype).reshape(-1, 1, 1)
        return (tensor - mean) / std


class Resize:
    def __init__(self, size, interpolation=None, antialias=True):
        self.size = size

    def __call__(self, image):
        return F.resize(image, self.size)


class CenterCrop:
    def __init__(self, size):
        self.size = size

    def __call__(self, image):
        return F.center_crop(image, self.size)


class Pad:
    def __init__(self, padding, fill=0, padding_mode="constant"):
        self.padding, self.padding_mode = padding, padding_mode

    def __call__(self, image):
        return F.pad(image, self.padding, self.padding_mode)


class RandomCrop:
    def __init__(self, size, padding=None, **kwargs):
        self.size = (size, size) if isinstance(size, numbers.Number) else tuple(size)
        self.padding = padding

    def __call__(self, image):
        if self.padding:
            image = F.pad(image, self.padding)
        width, height = F.image_size(image)
        top = int(torch.randint(0, height - self.size[0] + 1, (1,)))
        left = int(torch.randint(0, width - self.size[1] + 1, (1,)))
        return F.crop(image, top, left, *self.size)


class RandomHorizontalFlip:
    def __init__(self, p=0.5):
        self.p = p

    def __call__(self, image):
        return F.hflip(image) if torch.rand(1) < self.p else image


class RandomErasing:
    def __init__(self, p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0, inplace=False):
        self.p, self.value = p, value

    def __call__(self, tensor):
        if torch.rand(1) >= self.p:
            return tensor
        tensor = tensor.clone()
        _, height, width = tensor.shape
        top, left = int(torch.randint(0, height // 2, (1,))), int(torch.randint(0, width // 2, (1,)))
        tensor[:, top : top + height // 4, left : left + width // 4] = self.value
        return tensor


class ColorJitter:
    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, image):
        return image


class Grayscale:
    def __init__(self, num_output_channels=1):
        self.channels = num_output_channels

    def __call__(self, image):
        return image.convert("L")
