"""What the compile and activation-checkpointing tests share (tests/trainer/test_compile.py,
test_activation_checkpointing.py): a LoopModule of residual blocks that counts the activations each training step
keeps for backward, and a torch.compile backend that counts the graphs it is given."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tracktrain import LoopModule

WIDTH, HIDDEN = 16, 32  # no weight has 8 rows: a kept tensor of 8 rows (a batch's) is an activation


class Block(nn.Module):
    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.up = nn.Linear(WIDTH, HIDDEN)
        self.down = nn.Linear(HIDDEN, WIDTH)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(self.dropout(torch.tanh(self.up(x))))


class BlockNet(LoopModule):
    """Blocks in an nn.ModuleList (what FSDP shards, one by one, by default) between an embedding and a head.

    `kept[i]`: the elements of the batch-sized tensors autograd kept for the backward of training step i."""

    def __init__(self, dropout: float = 0.0, blocks: int = 3) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Linear(4, WIDTH)
        self.blocks = nn.ModuleList([Block(dropout) for _ in range(blocks)])
        self.head = nn.Linear(WIDTH, 2)
        self.kept: list[int] = []
        self.losses: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)

    def train_step(self, batch, batch_idx):
        x, y = batch
        kept = []

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            if tensor.dim() == 2 and tensor.shape[0] == x.shape[0]:
                kept.append(tensor.numel())
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            loss = F.cross_entropy(self(x), y)
        self.kept.append(sum(kept))
        self.losses.append(loss.item())  # a sync per step: fine in a test
        self.log("train_loss", loss)
        return loss

    def eval_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.01)


class CountingBackend:
    """A torch.compile backend that runs each graph as traced: `graphs` counts the graphs compiled, `runs` the
    calls of compiled code."""

    def __init__(self) -> None:
        self.graphs = 0
        self.runs = 0

    def __call__(self, graph_module: torch.fx.GraphModule, example_inputs: list) -> Callable[..., Any]:
        self.graphs += 1

        def run(*args: Any) -> Any:
            self.runs += 1
            return graph_module.forward(*args)

        return run


def state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in module.state_dict().items()}


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[name].float() - b[name].float()).abs().max().item() for name in a)
