"""The transforms the Ignite examples and Lightning programs use, on PIL images and tensors (random ones draw from
torch's generator); as in torchvision, the classes live in `torchvision.transforms.transforms`."""

from torchvision.transforms import functional as functional
from torchvision.transforms import transforms as transforms
from torchvision.transforms.transforms import *  # noqa: F403
from torchvision.transforms.transforms import __all__ as __all__
