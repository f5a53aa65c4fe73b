import os

import torch


class CIFAR10(torch.utils.data.Dataset):
    """Synthetic CIFAR-10 of the real shapes: 3x32x32 float images, 10 classes, learnable (class-dependent means)."""

    def __init__(self, root=None, train=True, download=False, transform=None):
        n = int(os.environ.get("STANDIN_SAMPLES", 512)) if train else int(os.environ.get("STANDIN_SAMPLES", 512)) // 4
        g = torch.Generator().manual_seed(0 if train else 1)
        self.targets = torch.randint(0, 10, (n,), generator=g)
        centers = torch.randn(10, 3, 1, 1, generator=torch.Generator().manual_seed(7))
        self.data = centers[self.targets] + 0.5 * torch.randn(n, 3, 32, 32, generator=g)
        self.transform = transform

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        x = self.data[i]
        return (self.transform(x) if self.transform else x), int(self.targets[i])
