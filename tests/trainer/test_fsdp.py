"""strategy="fsdp" (FSDP2's fully_shard) with 2 real gloo processes on the CPU: each rank holds half of every
parameter; the trained weights equal one process's on the full batch (with Adam, accumulation and clipping by
norm over the shards); accumulation skips the reduce-scatter; evaluation gathers what it needs; checkpoints are
single-device checkpoints with state_dict_type="full", written once, that resume exactly on 2 ranks and on 1 (and
back). The sharded checkpoints (the default): test_fsdp_sharded_checkpoints.py."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.utils.data import DataLoader, DistributedSampler

from tracktrain import LoopModule, Trainer
from tracktrain.callbacks import ModelCheckpoint, ModelSummary
from tracktrain.distributed.collectives import spawn
from tracktrain.trainer.strategies import FSDPStrategy
from tracktrain.trainer.strategies.fsdp import blocks_to_shard

from ._ddp import CrashAtStep
from ._ddp import load_per_rank as _load
from ._ddp import save_per_rank as _save
from ._tasks import checkpoint_files, make_loader

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.linear(x))


class BlockNet(LoopModule):
    """Blocks in an nn.ModuleList (sharded one by one by default) between layers the root shards."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Linear(4, 8)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)

    def train_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def eval_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.05)


def _trainer(root: str, **kwargs) -> Trainer:
    options = {
        "max_epochs": 2,
        "enable_progress_bar": False,
        "enable_checkpointing": False,
        "default_root_dir": root,
        "strategy": "fsdp",
        "gradient_clip_val": 0.5,  # small enough to clip: the norm must be the one over every shard
        **kwargs,
    }
    return Trainer(**options)


def _full_params(module: nn.Module) -> dict[str, list]:
    """The full weights, gathered with torch's own API (not the strategy's), on every rank."""
    state = get_model_state_dict(module, options=StateDictOptions(full_state_dict=True))
    return {name: tensor.flatten().tolist() for name, tensor in state.items()}


def _single_process_fit(root, batch_size: int) -> tuple[dict[str, list], float]:
    """The weights and the last val_loss of the same fit in one process."""
    module = BlockNet()
    options = {"max_epochs": 2, "enable_progress_bar": False, "enable_checkpointing": False, "gradient_clip_val": 0.5}
    trainer = Trainer(default_root_dir=root, **options)
    trainer.fit(module, make_loader(batch_size=batch_size), make_loader(n=32, seed=1, batch_size=16))
    params = {name: tensor.flatten().tolist() for name, tensor in module.state_dict().items()}
    return params, float(trainer.callback_metrics["val_loss"])


def _assert_same_weights(actual: dict[str, list], expected: dict[str, list]) -> None:
    assert actual.keys() == expected.keys()
    for name in expected:
        assert actual[name] == pytest.approx(expected[name], abs=2e-5), name


# --------------------------------------------------------------------------- sharded, and one process's result
def _fit_sharded(out: str, accumulate: int, batch_size: int = 8) -> None:
    module = BlockNet()
    trainer = _trainer(out, accumulate_grad_batches=accumulate)
    trainer.fit(module, make_loader(batch_size=batch_size), make_loader(n=32, seed=1, batch_size=batch_size))
    local = {name: parameter.to_local().numel() for name, parameter in module.named_parameters()}
    full = {name: parameter.numel() for name, parameter in module.named_parameters()}
    _save(out, f"shards{accumulate}", [local, full])
    _save(out, f"params{accumulate}", _full_params(module))
    _save(out, f"val_loss{accumulate}", float(trainer.callback_metrics["val_loss"]))
    _save(out, f"steps{accumulate}", trainer.global_step)
    summary = next(callback.last for callback in trainer.callbacks if isinstance(callback, ModelSummary))
    _save(out, f"summary{accumulate}", [summary.total_parameters, summary.total_bytes, summary.local_bytes])


@pytest.mark.parametrize("accumulate", [1, 2])
def test_ranks_hold_shards_and_train_what_one_process_trains_on_the_full_batch(tmp_path, accumulate):
    spawn(_fit_sharded, 2, args=(str(tmp_path), accumulate))
    shards = _load(tmp_path, f"shards{accumulate}")
    for local, full in shards:
        assert local.keys() == full.keys()
        for name in full:  # dim-0 shards: half of each parameter's rows (the 2-row head splits 1 + 1)
            assert local[name] == full[name] // 2, name
    # unshuffled DistributedSampler: a step averages 2 ranks x 8 x accumulate samples, as one process on all of them
    single, single_val_loss = _single_process_fit(tmp_path / "single", batch_size=16 * accumulate)
    params = _load(tmp_path, f"params{accumulate}")
    assert params[0] == params[1]
    _assert_same_weights(params[0], single)
    assert _load(tmp_path, f"steps{accumulate}") == [8 // accumulate] * 2
    # the default model summary: the whole model's counts, and what each rank holds of it (its shards)
    for (count, total_bytes, local_bytes), (local, full) in zip(_load(tmp_path, f"summary{accumulate}"), shards):
        assert count == sum(full.values()) and total_bytes == 4 * count
        assert local_bytes == 4 * sum(local.values()) < total_bytes
    # eval_step ran through the gathered root on each rank's half of the 32 validation samples (8 per batch): their
    # mean is the mean over all 32 (self.log does not reduce over ranks unless asked to, as under DDP)
    val_losses = _load(tmp_path, f"val_loss{accumulate}")
    assert sum(val_losses) / 2 == pytest.approx(single_val_loss, abs=1e-5)


@pytest.mark.slow  # 4 processes on this machine's 2 cores; CI runs the slow tests
def test_four_ranks_hold_a_quarter_each_and_train_what_one_process_trains(tmp_path):
    """4 ranks x 4 samples per step, as one process on 16: FSDP2 shards dim 0 in 4 (the 2-row head: 1, 1, 0, 0)."""
    spawn(_fit_sharded, 4, args=(str(tmp_path), 1, 4))
    shards = _load(tmp_path, "shards1", world_size=4)
    full = shards[0][1]
    for name, numel in full.items():
        rows = next(parameter for key, parameter in BlockNet().named_parameters() if key == name).shape[0]
        per_row = numel // rows
        chunk = -(-rows // 4)  # torch.chunk's rows per rank, the last ranks' remainder possibly empty
        expected = [max(0, min(chunk, rows - rank * chunk)) * per_row for rank in range(4)]
        assert [local[name] for local, _ in shards] == expected, name
    single, single_val_loss = _single_process_fit(tmp_path / "single", batch_size=16)
    params = _load(tmp_path, "params1", world_size=4)
    assert params[0] == params[1] == params[2] == params[3]
    _assert_same_weights(params[0], single)
    assert _load(tmp_path, "steps1", world_size=4) == [8] * 4
    assert sum(_load(tmp_path, "val_loss1", world_size=4)) / 4 == pytest.approx(single_val_loss, abs=1e-5)


def _fit_counting_reduce_scatters(out: str) -> None:
    calls = []
    reduce_scatter = dist.reduce_scatter_single  # what FSDP2 reduces gradients with (torch 2.13)

    def counting(*args, **kwargs):
        calls.append(1)
        return reduce_scatter(*args, **kwargs)

    dist.reduce_scatter_single = counting
    try:
        _trainer(out, max_epochs=1, accumulate_grad_batches=2).fit(BlockNet(), make_loader())
    finally:
        dist.reduce_scatter_single = reduce_scatter
    _save(out, "reduce_scatters", len(calls))


def test_accumulation_steps_skip_the_reduce_scatter(tmp_path):
    spawn(_fit_counting_reduce_scatters, 2, args=(str(tmp_path),))
    # 4 batches per rank, 2 windows; one reduce-scatter per shard group (2 blocks + the root) per window
    assert _load(tmp_path, "reduce_scatters") == [6, 6]


def _fit_twice(out: str) -> None:
    module = BlockNet()
    for _ in range(2):  # a second fit of the same module (a new Trainer): FSDP2 shards a module only once
        _trainer(out, max_epochs=1).fit(module, make_loader(batch_size=8))
    _save(out, "params", _full_params(module))


def test_a_second_fit_of_a_sharded_module_goes_on_training_it(tmp_path):
    spawn(_fit_twice, 2, args=(str(tmp_path),))
    single = BlockNet()
    for _ in range(2):
        options = {"enable_progress_bar": False, "enable_checkpointing": False, "gradient_clip_val": 0.5}
        Trainer(max_epochs=1, default_root_dir=tmp_path / "single", **options).fit(single, make_loader(batch_size=16))
    expected = {name: tensor.flatten().tolist() for name, tensor in single.state_dict().items()}
    params = _load(tmp_path, "params")
    assert params[0] == params[1]
    _assert_same_weights(params[0], expected)


# -------------------------------------------------------------------------------------------- mixed precision
def _fit_bf16(out: str) -> None:
    module = BlockNet()
    _trainer(out, max_epochs=1, precision="bf16-mixed").fit(module, make_loader())
    root = module._trainer.strategy.wrapped_model  # the FSDP root: gathers in bf16, keeps float32 shards
    _save(out, "dtypes", sorted({str(parameter.dtype) for parameter in module.parameters()}))
    _save(out, "policy", str(root._get_fsdp_state()._mp_policy.param_dtype))


@pytest.mark.slow  # 2 ranks: CI's slow run
def test_bf16_mixed_gathers_in_bf16_and_keeps_float32_shards(tmp_path):
    spawn(_fit_bf16, 2, args=(str(tmp_path),))
    assert _load(tmp_path, "dtypes") == [["torch.float32"]] * 2
    assert _load(tmp_path, "policy") == ["torch.bfloat16"] * 2


# ------------------------------------------------------------------------------------------------ checkpoints
def _fit_with_checkpoints(out: str, name: str, ckpt: str | None, crash_at: int | None) -> None:
    callbacks = [ModelCheckpoint(dirpath=os.path.join(out, "ckpt"), every_n_train_steps=3, save_top_k=None)]
    if crash_at is not None:
        callbacks.append(CrashAtStep(crash_at))
    module = BlockNet()
    strategy = FSDPStrategy(state_dict_type="full")
    trainer = _trainer(out, max_epochs=3, seed=5, callbacks=callbacks, strategy=strategy)
    try:
        trainer.fit(module, DataLoader(make_loader().dataset, batch_size=4, shuffle=True), ckpt_path=ckpt)
    except RuntimeError:
        return  # the "kill": every rank stops at the same step
    _save(out, name, _full_params(module))


def _fit_one_process(out: str, ckpt: str) -> dict[str, list]:
    module = BlockNet()
    trainer = Trainer(
        max_epochs=3,
        seed=5,
        enable_progress_bar=False,
        enable_checkpointing=False,
        default_root_dir=out,
        gradient_clip_val=0.5,
    )
    # the 2 ranks' order (DistributedSampler, the run's seed): a step reads the 8 samples both ranks read
    dataset = make_loader().dataset
    sampler = DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=5)
    trainer.fit(module, DataLoader(dataset, batch_size=8, sampler=sampler), ckpt_path=ckpt)
    return {name: tensor.flatten().tolist() for name, tensor in module.state_dict().items()}


@pytest.mark.slow  # 30 s of ranks; CI runs the slow tests
def test_a_sharded_checkpoint_is_a_single_device_checkpoint_and_resumes_exactly(tmp_path):
    spawn(_fit_with_checkpoints, 2, args=(str(tmp_path / "full"), "params", None, None))
    spawn(_fit_with_checkpoints, 2, args=(str(tmp_path / "cut"), "params", None, 10))  # 8 steps per epoch
    assert checkpoint_files(tmp_path / "cut" / "ckpt") == ["checkpoint_3.pt", "checkpoint_6.pt", "checkpoint_9.pt"]
    checkpoint = tmp_path / "cut" / "ckpt" / "checkpoint_9.pt"

    # written once, by rank 0, in full: loads into the module without a Trainer, optimizer state by index
    states = torch.load(checkpoint, weights_only=False)
    plain = BlockNet()
    plain.load_state_dict(states["model"])
    optimizer = plain.configure_optimizers()
    optimizer.load_state_dict(states["optimizers"][0])
    assert sorted(optimizer.state_dict()["state"]) == list(range(len(list(plain.parameters()))))

    spawn(_fit_with_checkpoints, 2, args=(str(tmp_path / "cut"), "params", str(checkpoint), None))
    full, resumed = _load(tmp_path / "full", "params"), _load(tmp_path / "cut", "params")
    assert resumed[0] == resumed[1] == full[0]  # bit for bit

    # the same checkpoint resumes in one process (2 ranks x 4 samples = one process's 8 per step)
    with pytest.warns(UserWarning, match=r"changed settings: trainer/strategy: 'fsdp' -> 'auto'|generator states"):
        one_process = _fit_one_process(str(tmp_path / "one"), str(checkpoint))
    _assert_same_weights(one_process, full[0])


def _resume_one_process_checkpoint(out: str, ckpt: str) -> None:
    module = BlockNet()
    _trainer(out, max_epochs=3, seed=5).fit(
        module, DataLoader(make_loader().dataset, batch_size=4, shuffle=True), ckpt_path=ckpt
    )
    _save(out, "params", _full_params(module))


@pytest.mark.slow  # 30 s of ranks; CI runs the slow tests
def test_a_single_device_checkpoint_resumes_sharded(tmp_path):
    module = BlockNet()
    callbacks = [ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), every_n_train_steps=9, save_top_k=None)]
    trainer = Trainer(
        max_steps=9,
        seed=5,
        enable_progress_bar=False,
        default_root_dir=tmp_path,
        callbacks=callbacks,
        gradient_clip_val=0.5,
    )
    trainer.fit(module, DataLoader(make_loader().dataset, batch_size=8, shuffle=True))
    checkpoint = tmp_path / "ckpt" / "checkpoint_9.pt"
    spawn(_resume_one_process_checkpoint, 2, args=(str(tmp_path / "sharded"), str(checkpoint)))
    expected = _fit_one_process(str(tmp_path / "one"), str(checkpoint))
    resumed = _load(tmp_path / "sharded", "params")
    assert resumed[0] == resumed[1]
    _assert_same_weights(resumed[0], expected)


# ------------------------------------------------------------------------------------------------- bad input
def test_blocks_to_shard_takes_classes_a_predicate_or_module_list_elements():
    module = BlockNet()
    assert blocks_to_shard(module, None) == list(module.blocks)
    assert blocks_to_shard(module, Block) == list(module.blocks)
    # deepest first (FSDP2 shards children before their parents), in module order among equals
    linears = [module.blocks[0].linear, module.blocks[1].linear, module.embed, module.head]
    assert blocks_to_shard(module, [nn.Linear]) == linears
    deepest_first = blocks_to_shard(module, lambda child: isinstance(child, (Block, nn.Linear)))
    assert deepest_first.index(module.blocks[0].linear) < deepest_first.index(module.blocks[0])


def test_bad_fsdp_options_say_what_they_take():
    with pytest.raises(TypeError, match=r"auto_wrap=.*nn.Module classes"):
        blocks_to_shard(BlockNet(), ["Block"])
    with pytest.raises(ValueError, match=r"reshard_after_forward=0\) must be at least 1 rank"):
        FSDPStrategy(reshard_after_forward=0)
    with pytest.raises(TypeError, match=r"MixedPrecisionPolicy"):
        FSDPStrategy(mixed_precision=torch.bfloat16)
    assert isinstance(Trainer(strategy="fsdp").strategy, FSDPStrategy)
