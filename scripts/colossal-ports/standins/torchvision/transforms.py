"""Stand-in transforms: every transform keeps the (already tensor) image as it is."""

import sys
from typing import Any


class _Keep:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, x: Any) -> Any:
        return x


def __getattr__(name: str) -> type:
    if name[:1].isupper():
        return _Keep  # Compose, RandomCrop, ColorJitter, Normalize, ...
    raise AttributeError(name)


transforms = sys.modules[
    __name__
]  # torchvision.transforms.transforms, as `from torchvision.transforms import transforms`
