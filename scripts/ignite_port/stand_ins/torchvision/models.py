"""Tiny models under torchvision's model names (a real ResNet would take minutes per epoch on two cores): the same
interface the examples touch (`fc` with `in_features`, `num_classes`)."""

from __future__ import annotations

from torch import nn

__all__ = ["VGG16_Weights", "resnet18", "resnet34", "resnet50", "vgg16"]


class TinyResNet(nn.Module):
    def __init__(self, num_classes=1000, width=16):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = nn.Sequential(nn.Conv2d(width, width, 3, padding=1, stride=2), nn.BatchNorm2d(width), nn.ReLU())
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x):
        x = self.layer1(self.relu(self.bn1(self.conv1(x))))
        return self.fc(self.avgpool(x).flatten(1))


def resnet18(weights=None, num_classes=1000, **kwargs):
    return TinyResNet(num_classes)


def resnet34(weights=None, num_classes=1000, **kwargs):
    return TinyResNet(num_classes, width=24)


def resnet50(weights=None, num_classes=1000, **kwargs):
    return TinyResNet(num_classes, width=32)


class VGG16_Weights:  # noqa: N801 - torchvision's name; torchmetrics imports it (and vgg16) when torchvision is there
    DEFAULT = IMAGENET1K_V1 = IMAGENET1K_FEATURES = None


def vgg16(weights=None, **kwargs):
    return TinyResNet(kwargs.get("num_classes", 1000))
