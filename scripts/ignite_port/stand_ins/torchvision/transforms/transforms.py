"""torchvision.transforms.transforms: the transform classes (`torchvision.transforms` re-exports them)."""

from __future__ import annotations

import math
import numbers

import torch

from torchvision.transforms import functional as F

__all__ = [
    "CenterCrop",
    "ColorJitter",
    "Compose",
    "GaussianBlur",
    "Grayscale",
    "Lambda",
    "Normalize",
    "Pad",
    "RandomApply",
    "RandomCrop",
    "RandomErasing",
    "RandomGrayscale",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
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


class RandomResizedCrop:
    """torchvision's: a crop of a random area (`scale` of the image's) and aspect ratio (`ratio`, drawn
    log-uniformly), resized to `size`; the center crop after 10 failed draws."""

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0), interpolation=None, antialias=True):
        self.size = (size, size) if isinstance(size, numbers.Number) else tuple(size)
        self.scale, self.ratio = scale, ratio

    @staticmethod
    def get_params(image, scale, ratio):
        width, height = F.image_size(image)
        area = height * width
        log_ratio = torch.log(torch.tensor(ratio))
        for _ in range(10):
            target_area = area * torch.empty(1).uniform_(scale[0], scale[1]).item()
            aspect_ratio = math.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1]).item())
            w = int(round(math.sqrt(target_area * aspect_ratio)))
            h = int(round(math.sqrt(target_area / aspect_ratio)))
            if 0 < w <= width and 0 < h <= height:
                top = int(torch.randint(0, height - h + 1, size=(1,)).item())
                left = int(torch.randint(0, width - w + 1, size=(1,)).item())
                return top, left, h, w
        in_ratio = float(width) / float(height)
        if in_ratio < min(ratio):
            w, h = width, int(round(width / min(ratio)))
        elif in_ratio > max(ratio):
            h, w = height, int(round(height * max(ratio)))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, image):
        top, left, height, width = self.get_params(image, self.scale, self.ratio)
        return F.resize(F.crop(image, top, left, height, width), self.size)


class RandomApply:
    def __init__(self, transforms, p=0.5):
        self.transforms, self.p = transforms, p

    def __call__(self, image):
        if self.p < torch.rand(1):
            return image
        for transform in self.transforms:
            image = transform(image)
        return image


class RandomGrayscale:
    def __init__(self, p=0.1):
        self.p = p

    def __call__(self, image):
        if torch.rand(1) >= self.p:
            return image
        channels = 1 if F.channels(image) == 1 else 3
        return F.rgb_to_grayscale(image, channels)


class GaussianBlur:
    """torchvision's: a blur of a `kernel_size` Gaussian whose sigma is drawn uniformly from `sigma`."""

    def __init__(self, kernel_size, sigma=(0.1, 2.0)):
        self.kernel_size = (kernel_size, kernel_size) if isinstance(kernel_size, numbers.Number) else tuple(kernel_size)
        self.sigma = (sigma, sigma) if isinstance(sigma, numbers.Number) else tuple(sigma)

    def __call__(self, image):
        sigma = torch.empty(1).uniform_(self.sigma[0], self.sigma[1]).item()
        return F.gaussian_blur(image, self.kernel_size, [sigma, sigma])
