"""The data: scikit-learn's bundled digits (8x8 images, 10 classes), split once into training and validation sets.
Offline: the data ships inside scikit-learn. Replace `load_arrays` with your own data to train on it."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from tracktrain import DataModule

NUM_FEATURES, NUM_CLASSES = 64, 10


def load_arrays() -> tuple[np.ndarray, np.ndarray]:
    """Features scaled to [0, 1] (pixels are 0..16; a fixed scale, as some border pixels are constant) and labels."""
    from sklearn.datasets import load_digits

    features, labels = load_digits(return_X_y=True)
    return (features / 16.0).astype(np.float32), labels.astype(np.int64)


class DigitsData(DataModule):
    """Training and validation loaders over one stratified split, the same for a given seed (so a resumed run
    trains on the same examples). The arguments are the config's `data:` settings; `seed` follows `seed_everything`."""

    def __init__(self, batch_size: int = 64, val_fraction: float = 0.2, seed: int = 0) -> None:
        from sklearn.model_selection import train_test_split

        if batch_size < 1:
            raise ValueError(f"data.batch_size must be at least 1, got {batch_size!r}.")
        if not 0.0 < val_fraction < 1.0:
            raise ValueError(f"data.val_fraction must be between 0 and 1, got {val_fraction!r}.")
        super().__init__()
        self.save_hyperparameters()
        features, labels = load_arrays()
        x_train, x_val, y_train, y_val = train_test_split(
            features, labels, test_size=val_fraction, random_state=seed, stratify=labels
        )
        self.train_set = TensorDataset(torch.from_numpy(x_train), torch.from_numpy(y_train))
        self.val_set = TensorDataset(torch.from_numpy(x_val), torch.from_numpy(y_val))
        self.batch_size = batch_size
        self.seed = seed

    def train_dataloader(self) -> DataLoader:
        generator = torch.Generator().manual_seed(self.seed)
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, generator=generator)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=256)
