"""`TensorParallelStrategy` with 2 real gloo processes: the plan's linear layers hold half of their weights on each
rank (column-wise: half the output rows; row-wise: half the input columns), every rank reads the same batches and
sees the same loss, and the fit trains what one process trains; its checkpoints are sharded, resume exactly on 2
ranks and read whole in one process."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader, DistributedSampler

from tracktrain import LoopModule, Trainer
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.distributed import spawn
from tracktrain.handlers.checkpoint_state import read_checkpoint
from tracktrain.trainer.strategies import TensorParallelStrategy

from ._ddp import load_per_rank as _load
from ._ddp import save_per_rank as _save
from ._tasks import make_loader

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]

PLAN = {"up": "colwise", "down": "rowwise"}


class Mlp(LoopModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up = nn.Linear(4, 16)
        self.down = nn.Linear(16, 2)

    def forward(self, x):
        return self.down(torch.tanh(self.up(x)))

    def train_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.05)


def _full(module: nn.Module) -> dict[str, list]:
    return {
        name: (value.full_tensor() if isinstance(value, DTensor) else value).flatten().tolist()
        for name, value in module.state_dict().items()
    }


def _fit(out: str, strategy, ckpt: str | None = None, max_steps: int = 12) -> Mlp:
    module = Mlp()
    callbacks = [ModelCheckpoint(dirpath=os.path.join(out, "ckpt"), every_n_train_steps=4, save_top_k=None)]
    trainer = Trainer(
        max_steps=max_steps,
        seed=3,
        enable_progress_bar=False,
        default_root_dir=out,
        strategy=strategy,
        callbacks=callbacks,
        loggers=False,
    )
    # the order TensorParallelStrategy gives a shuffling loader on every rank, for the one-process run too
    dataset = make_loader().dataset
    sampler = DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=3)
    trainer.fit(module, DataLoader(dataset, batch_size=8, sampler=sampler), ckpt_path=ckpt)
    return module


def _tensor_parallel(out: str) -> None:
    module = _fit(out, TensorParallelStrategy(PLAN))
    local = {name: list(parameter.to_local().shape) for name, parameter in module.named_parameters()}
    _save(out, "local", local)
    _save(out, "params", _full(module))
    resumed = _fit(
        os.path.join(out, "again"), TensorParallelStrategy(PLAN), os.path.join(out, "ckpt", "checkpoint_8.dcp")
    )
    _save(out, "resumed", _full(resumed))


def test_the_plan_splits_the_layers_and_the_fit_trains_what_one_process_trains(tmp_path):
    spawn(_tensor_parallel, 2, args=(str(tmp_path),))
    # column-wise: half of up's output rows (and bias); row-wise: half of down's input columns, its bias whole
    assert (
        _load(tmp_path, "local") == [{"up.weight": [8, 4], "up.bias": [8], "down.weight": [2, 8], "down.bias": [2]}] * 2
    )
    expected = _full(_fit(str(tmp_path / "one"), "auto"))
    params = _load(tmp_path, "params")
    assert params[0] == params[1]
    for name, values in expected.items():
        assert params[0][name] == pytest.approx(values, abs=1e-5), name
    # sharded checkpoints: each rank's slices; read whole in one process, equal to what the ranks held at step 12
    states = read_checkpoint(tmp_path / "ckpt" / "checkpoint_12.dcp")
    for name, tensor in states["model"].items():
        assert tensor.flatten().tolist() == params[0][name], name
    # resumed at step 8 on 2 ranks: bit for bit where the uninterrupted run ended
    assert _load(tmp_path, "resumed") == params


def test_a_plan_naming_no_layer_says_which_layers_there_are():
    strategy = TensorParallelStrategy({"nope": "colwise"})
    with pytest.raises(ValueError, match=r"names \['nope'\].*its linear layers are \['up', 'down'\]"):
        strategy.setup_module(Mlp())
    with pytest.raises(ValueError, match="use 'colwise', 'rowwise'"):
        TensorParallelStrategy({"up": "diagonal"})


def test_a_shuffling_loader_reads_the_same_order_on_every_rank_drawn_from_the_run_seed():
    dataset = make_loader().dataset
    orders = []
    for _ in range(2):  # two ranks' strategies
        strategy = TensorParallelStrategy(PLAN)
        strategy.seed = 3
        loader = strategy.distribute(DataLoader(dataset, batch_size=8, shuffle=True), shuffle_default=True)
        orders.append(list(loader.sampler))
    assert orders[0] == orders[1] == list(DistributedSampler(dataset, num_replicas=1, rank=0, seed=3))
    assert orders[0] != list(range(len(dataset)))  # shuffled
