"""A stand-in for torchvision in the Ignite example ports (scripts/ignite_port): datasets of synthetic images of the
real shapes (nothing is downloaded), the transforms the examples use, tiny models under torchvision's names."""

from torchvision import datasets, models, transforms, utils

__version__ = "0.0-stand-in"
__all__ = ["datasets", "models", "transforms", "utils"]
