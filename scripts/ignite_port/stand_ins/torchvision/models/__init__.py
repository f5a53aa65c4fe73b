"""torchvision.models' ResNets and DenseNet with torchvision's real layouts (`torchvision.models.resnet`,
`torchvision.models.densenet`), randomly initialised as torchvision does: no weights are downloaded, so `weights=` /
`pretrained=` are accepted and give the untrained model. `vgg16` stays a tiny stand-in (torchmetrics imports it)."""

from __future__ import annotations

from torch import nn

from torchvision.models import densenet, resnet
from torchvision.models.densenet import DenseNet, densenet121, densenet161, densenet169, densenet201
from torchvision.models.resnet import (
    ResNet,
    ResNet18_Weights,
    ResNet34_Weights,
    ResNet50_Weights,
    resnet18,
    resnet34,
    resnet50,
    resnet101,
    resnet152,
)

__all__ = [
    "DenseNet",
    "ResNet",
    "ResNet18_Weights",
    "ResNet34_Weights",
    "ResNet50_Weights",
    "VGG16_Weights",
    "densenet",
    "densenet121",
    "densenet161",
    "densenet169",
    "densenet201",
    "resnet",
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
    "vgg16",
]


class _TinyNet(nn.Module):
    def __init__(self, num_classes=1000, width=16):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(inplace=True))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x):
        return self.fc(self.avgpool(self.features(x)).flatten(1))


class VGG16_Weights:  # noqa: N801 - torchvision's name; torchmetrics imports it (and vgg16) when torchvision is there
    DEFAULT = IMAGENET1K_V1 = IMAGENET1K_FEATURES = None


def vgg16(weights=None, **kwargs):
    return _TinyNet(kwargs.get("num_classes", 1000))
