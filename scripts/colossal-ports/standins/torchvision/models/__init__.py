"""Small stand-ins of torchvision's ResNets: conv, BN, ReLU, pooled, linear head (same interface: num_classes)."""

import torch.nn as nn


def _small(num_classes=10, width=16):
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.Conv2d(width, width, 3, padding=1, stride=2),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(width, num_classes),
    )


def resnet18(num_classes=1000, **kw):
    return _small(num_classes)


def resnet34(num_classes=1000, **kw):
    return _small(num_classes)


def resnet50(num_classes=1000, **kw):
    return _small(num_classes)
