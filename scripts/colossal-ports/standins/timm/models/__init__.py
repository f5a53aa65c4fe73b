"""Stand-in of timm's ViT-B/16: a small patch-embedding transformer classifier of the same interface."""

import torch.nn as nn


def vit_base_patch16_224(drop_rate=0.0, num_classes=1000, **kw):
    return nn.Sequential(
        nn.Conv2d(3, 32, 8, stride=8),
        nn.Flatten(2),
        nn.Dropout(drop_rate),
        nn.Flatten(),
        nn.Linear(32 * 16, num_classes),
    )
