"""torchvision.utils' save_image and make_grid, simply."""

from __future__ import annotations

import torch


def make_grid(tensor, nrow=8, padding=2, normalize=False, **kwargs):
    if isinstance(tensor, (list, tuple)):
        tensor = torch.stack(list(tensor))
    if normalize:
        tensor = (tensor - tensor.min()) / (tensor.max() - tensor.min() + 1e-12)
    rows = [torch.cat(list(tensor[i : i + nrow]), dim=-1) for i in range(0, len(tensor), nrow)]
    width = max(row.shape[-1] for row in rows)
    rows = [torch.nn.functional.pad(row, (0, width - row.shape[-1])) for row in rows]
    return torch.cat(rows, dim=-2)


def save_image(tensor, fp, nrow=8, padding=2, normalize=False, **kwargs):
    grid = make_grid(tensor, nrow=nrow, padding=padding, normalize=normalize)
    torch.save(grid, fp if not hasattr(fp, "write") else fp)
