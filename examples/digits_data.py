"""scikit-learn's bundled digits (8x8 images, 10 classes) as DataLoaders: offline, nothing to download."""

from __future__ import annotations

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset


def digits_loaders(batch_size: int, seed: int) -> tuple[DataLoader, DataLoader]:
    features, labels = load_digits(return_X_y=True)
    x_train, x_val, y_train, y_val = train_test_split(
        features, labels, test_size=0.2, random_state=seed, stratify=labels
    )

    def dataset(x, y):
        # pixels are 0..16; a fixed scale, because some border pixels are constant in one split
        return TensorDataset(torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y, dtype=torch.long))

    generator = torch.Generator().manual_seed(seed)
    train = DataLoader(dataset(x_train, y_train), batch_size=batch_size, shuffle=True, generator=generator)
    val = DataLoader(dataset(x_val, y_val), batch_size=256)
    return train, val
