"""Small stand-ins of torchvision's ResNets: conv, BN, ReLU, pooled, a linear head `fc` (same interface: num_classes)."""

import torch.nn as nn


class _SmallResNet(nn.Module):
    def __init__(self, num_classes: int = 1000, width: int = 16) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1, stride=2),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.fc(self.features(x))


def resnet18(num_classes: int = 1000, **kwargs: object) -> nn.Module:
    return _SmallResNet(num_classes)


resnet34 = resnet50 = resnet101 = resnet152 = resnet18
