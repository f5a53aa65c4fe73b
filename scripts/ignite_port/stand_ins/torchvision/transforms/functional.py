"""torchvision.transforms.functional's few functions the examples call, on PIL images and CHW tensors."""

from __future__ import annotations

import numbers

import numpy as np
import torch
from PIL import Image


def _pair(size):
    return (size, size) if isinstance(size, numbers.Number) else tuple(size)


def image_size(image):
    """(width, height)."""
    if isinstance(image, torch.Tensor):
        return image.shape[-1], image.shape[-2]
    return image.size


def to_tensor(image):
    array = np.asarray(image, dtype=np.float32) / 255.0
    if array.ndim == 2:
        array = array[:, :, None]
    return torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))


def to_pil_image(tensor):
    array = (tensor.clamp(0, 1) * 255).byte().permute(1, 2, 0).numpy()
    return Image.fromarray(array[:, :, 0] if array.shape[2] == 1 else array)


def resize(image, size, interpolation=None, antialias=True):
    if isinstance(size, numbers.Number):
        width, height = image_size(image)
        scale = size / min(width, height)
        target = (max(1, round(height * scale)), max(1, round(width * scale)))
    else:
        target = tuple(size)
    if isinstance(image, torch.Tensor):
        return torch.nn.functional.interpolate(image[None], size=target, mode="bilinear", align_corners=False)[0]
    return image.resize((target[1], target[0]), Image.BICUBIC)


def crop(image, top, left, height, width):
    if isinstance(image, torch.Tensor):
        return image[..., top : top + height, left : left + width]
    return image.crop((left, top, left + width, top + height))


def center_crop(image, size):
    height, width = _pair(size)
    image_width, image_height = image_size(image)
    return crop(image, (image_height - height) // 2, (image_width - width) // 2, height, width)


def hflip(image):
    if isinstance(image, torch.Tensor):
        return image.flip(-1)
    return image.transpose(Image.FLIP_LEFT_RIGHT)


def pad(image, padding, padding_mode="constant"):
    left, top, right, bottom = (
        (padding,) * 4
        if isinstance(padding, numbers.Number)
        else (tuple(padding) * 2 if len(padding) == 2 else tuple(padding))
    )
    tensor = image if isinstance(image, torch.Tensor) else to_tensor(image)
    mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}[padding_mode]
    padded = torch.nn.functional.pad(tensor[None], (left, right, top, bottom), mode=mode)[0]
    return padded if isinstance(image, torch.Tensor) else to_pil_image(padded)


def channels(image):
    if isinstance(image, torch.Tensor):
        return image.shape[-3]
    return len(image.getbands())


def rgb_to_grayscale(image, num_output_channels=1):
    if not isinstance(image, torch.Tensor):
        gray = image.convert("L")
        return gray if num_output_channels == 1 else Image.merge("RGB", [gray] * 3)
    if image.shape[-3] == 1:
        gray = image
    else:
        r, g, b = image.unbind(-3)
        gray = (0.2989 * r + 0.587 * g + 0.114 * b).unsqueeze(-3).to(image.dtype)
    return gray.expand(*gray.shape[:-3], num_output_channels, *gray.shape[-2:]).clone()


def gaussian_blur(image, kernel_size, sigma=None):
    """torchvision's: a separable Gaussian kernel, reflect-padded, on a CHW tensor (a PIL image round-trips)."""
    tensor = image if isinstance(image, torch.Tensor) else to_tensor(image)
    kernels = []
    for size, s in zip(kernel_size, sigma):
        x = torch.linspace(-(size - 1) * 0.5, (size - 1) * 0.5, steps=size)
        pdf = torch.exp(-0.5 * (x / s).pow(2))
        kernels.append(pdf / pdf.sum())
    kernel = torch.mm(kernels[1][:, None], kernels[0][None, :]).to(tensor.dtype)
    c = tensor.shape[-3]
    batch = tensor.reshape(-1, c, *tensor.shape[-2:])
    padding = [kernel_size[0] // 2, kernel_size[0] // 2, kernel_size[1] // 2, kernel_size[1] // 2]
    batch = torch.nn.functional.pad(batch, padding, mode="reflect")
    out = torch.nn.functional.conv2d(batch, kernel.expand(c, 1, *kernel.shape), groups=c).reshape(tensor.shape)
    return out if isinstance(image, torch.Tensor) else to_pil_image(out)
