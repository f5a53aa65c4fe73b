"""Stand-in for torchvision (which does not install beside torch 2.13 here): CIFAR10 of synthetic 3x32x32 images,
small ResNets, and transforms that keep the tensors as they are."""

from . import datasets, models, transforms

__all__ = ["datasets", "models", "transforms"]
