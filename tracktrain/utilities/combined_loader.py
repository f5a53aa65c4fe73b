"""Lightning's `CombinedLoader` is not offered: a fit reads one training loader; what to use instead is said here."""

from __future__ import annotations

from typing import Any

__all__ = ["CombinedLoader"]


class CombinedLoader:
    """Refused when built: the Trainer trains on one loader per fit, and its resume counts that loader's batches."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "CombinedLoader (Lightning's) is not offered: a fit trains on one loader, whose batches a resume counts "
            "exactly. Combine the datasets instead (torch.utils.data.ConcatDataset, or a Dataset whose items hold "
            "one sample of each) in one DataLoader; for validation, pass several loaders as a list "
            "(fit(module, train, [val_a, val_b])), which the Trainer reads one after the other."
        )
