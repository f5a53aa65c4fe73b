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
from tracktrain.checkpoint.state import read_checkpoint
from tracktrain.distributed.collectives import spawn
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
    # a plain shuffling loader: every rank reads the order one process reads with the same seed
    trainer.fit(module, DataLoader(make_loader().dataset, batch_size=8, shuffle=True), ckpt_path=ckpt)
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


@pytest.mark.slow  # 25 s of ranks; CI runs the slow tests
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


def test_a_shuffling_loader_is_left_to_the_engine_which_draws_the_same_order_on_every_rank_from_the_run_seed():
    """Each rank's training engine draws a pass's order from the run's seed (tests/engine/test_deterministic.py), the
    same on every rank and in one process; the strategy leaves the loader as it is (a DistributedSampler of its own
    would give another order than one process's). The fits above compare 2 ranks with one process end to end."""
    loader = DataLoader(make_loader().dataset, batch_size=8, shuffle=True)
    assert TensorParallelStrategy(PLAN).distribute(loader, shuffle_default=True) is loader


# ------------------------------------------------------------------------------------------ 2-D: FSDP2 + TP
class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8)

    def forward(self, x):
        return x + self.down(torch.tanh(self.up(x)))


class BlockStack(Mlp):
    """Blocks of a column-wise and a row-wise layer in an nn.ModuleList (FSDP shards each block), Mlp's steps."""

    def __init__(self) -> None:
        LoopModule.__init__(self)
        torch.manual_seed(0)
        self.embed = nn.Linear(4, 8)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


PLAN_2D = {
    f"blocks.{index}.{name}": style for index in (0, 1) for name, style in (("up", "colwise"), ("down", "rowwise"))
}


def _fit_2d(out: str, strategy, batch_size: int, replicas: int, rank: int) -> BlockStack:
    module = BlockStack()
    trainer = Trainer(
        max_steps=8,
        seed=5,
        enable_progress_bar=False,
        default_root_dir=out,
        strategy=strategy,
        callbacks=[ModelCheckpoint(dirpath=os.path.join(out, "ckpt"), every_n_train_steps=8, save_top_k=None)],
        loggers=False,
    )
    dataset = make_loader().dataset
    sampler = DistributedSampler(dataset, num_replicas=replicas, rank=rank, shuffle=True, seed=5)
    trainer.fit(module, DataLoader(dataset, batch_size=batch_size, sampler=sampler))
    return module


def _two_dimensional(out: str) -> None:
    import torch.distributed as dist

    from tracktrain.trainer.strategies import FSDPStrategy

    strategy = FSDPStrategy(tensor_parallel=PLAN_2D, tensor_parallel_size=2)
    rank = int(os.environ["RANK"])
    module = _fit_2d(out, strategy, 4, 2, rank // 2)  # the two ranks of a mesh row read the same data shard
    up = module.blocks[0].up.weight
    _save(out, "placements", [str(placement) for placement in up.placements] + [list(up.to_local().shape)])
    _save(out, "params", _full(module))
    dist.barrier()


@pytest.mark.slow  # 4 ranks on 2 cores; CI runs the slow tests
def test_fsdp_with_a_tensor_parallel_plan_shards_both_ways_and_trains_what_one_process_trains(tmp_path):
    spawn(_two_dimensional, 4, args=(str(tmp_path),))
    # up.weight (16 x 8): split by rows over tp (8 rows each), then sharded over dp (4 rows each)
    for placements in _load(tmp_path, "placements", 4):
        assert placements[-1] == [4, 8]
        assert placements[:2] == ["_S(0, 2)", "S(0)"]  # dim 0 over both mesh dimensions (dp strided by tp)
    expected = _full(_fit_2d(str(tmp_path / "one"), "auto", 8, 1, 0))
    params = _load(tmp_path, "params", 4)
    assert params[0] == params[1] == params[2] == params[3]
    for name, values in expected.items():
        assert params[0][name] == pytest.approx(values, abs=1e-5), name
    states = read_checkpoint(tmp_path / "ckpt" / "checkpoint_8.dcp")  # sharded both ways, read whole
    for name, tensor in states["model"].items():
        assert tensor.flatten().tolist() == pytest.approx(params[0][name], abs=1e-6), name


def test_a_loaders_own_sampler_must_read_the_shard_the_strategy_gives():
    dataset = make_loader().dataset
    strategy = TensorParallelStrategy(PLAN)
    per_rank = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset, num_replicas=2, rank=1))
    with pytest.raises(
        ValueError,
        match=r"reads shard 1 of 2, but under strategy='tensor_parallel' this rank reads "
        r"shard 0 of 1: build it with DistributedSampler\(dataset, num_replicas=1, rank=0\)",
    ):
        strategy.distribute(per_rank, shuffle_default=True)
    whole = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset, num_replicas=1, rank=0))
    assert strategy.distribute(whole, shuffle_default=True) is whole
