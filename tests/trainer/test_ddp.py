"""strategy="ddp" with 2 real gloo processes on the CPU (started by tracktrain.distributed.spawn, as torchrun
would): identical parameters on every rank, equal to one process on the full batch; sharded, reshuffled data;
no all-reduce on accumulation steps; rank-0-only files; stops agreed by all ranks; a failing rank ends the run."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.utils.data import DataLoader, Dataset

from tests import _processes
from tracktrain import Callback, Trainer
from tracktrain.distributed.collectives import spawn

from ._ddp import CrashAtStep
from ._ddp import ddp_trainer as _trainer
from ._ddp import load_per_rank as _load
from ._ddp import save_per_rank as _save
from ._tasks import Classifier, checkpoint_files, make_loader

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]


def _params(module) -> list:
    return [p.detach().flatten().tolist() for p in module.parameters()]


# ------------------------------------------------------------------------------- the same result as one process
def _fit_sequential(out: str, accumulate: int) -> None:
    module = Classifier()
    trainer = _trainer(out, accumulate_grad_batches=accumulate)
    trainer.fit(module, make_loader(batch_size=8))
    _save(out, f"params{accumulate}", _params(module))
    _save(out, f"steps{accumulate}", trainer.global_step)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_ranks_stay_identical_and_equal_one_process_on_the_full_batch(tmp_path, accumulate):
    spawn(_fit_sequential, 2, args=(str(tmp_path), accumulate))
    params = _load(tmp_path, f"params{accumulate}")
    assert params[0] == params[1]
    # unshuffled DistributedSampler: rank 0 reads samples 0, 2, 4..., rank 1 samples 1, 3, 5...; a step averages
    # both ranks' gradients, which is the gradient of 2 x 8 x accumulate consecutive samples in one process
    single = Classifier()
    Trainer(max_epochs=2, enable_progress_bar=False, enable_checkpointing=False, default_root_dir=tmp_path).fit(
        single, make_loader(batch_size=16 * accumulate)
    )
    for ddp_param, param in zip(params[0], _params(single)):
        assert ddp_param == pytest.approx(param, abs=1e-5)
    assert _load(tmp_path, f"steps{accumulate}") == [8 // accumulate] * 2  # 64 samples / 2 ranks / 8 per batch


class CountAllReduces(Callback):
    def on_train_start(self, trainer, module):
        self.calls = 0

        def counting_hook(state, bucket):
            self.calls += 1
            return default_hooks.allreduce_hook(None, bucket)

        trainer.strategy.wrapped_model.register_comm_hook(None, counting_hook)


def _fit_counting(out: str) -> None:
    counter = CountAllReduces()
    _trainer(out, max_epochs=1, accumulate_grad_batches=2, callbacks=[counter]).fit(Classifier(), make_loader())
    _save(out, "allreduces", counter.calls)


def test_accumulation_steps_skip_the_all_reduce(tmp_path):
    spawn(_fit_counting, 2, args=(str(tmp_path),))
    assert _load(tmp_path, "allreduces") == [2, 2]  # 4 batches per rank, one all-reduce per 2 (one bucket)


# --------------------------------------------------------------------------------------------- data sharding
class Indexed(Dataset):
    def __len__(self):
        return 40

    def __getitem__(self, index):
        return torch.randn(4), torch.tensor(index % 2), torch.tensor(index)


class Recording(Classifier):
    def __init__(self):
        super().__init__()
        self.seen: list[list[int]] = []

    def on_train_epoch_start(self):
        self.seen.append([])

    def train_step(self, batch, batch_idx):
        x, y, index = batch
        self.seen[-1] += index.tolist()
        return F.cross_entropy(self(x), y)


def _fit_shuffled(out: str) -> None:
    module = Recording()
    _trainer(out, max_epochs=2, seed=3).fit(module, DataLoader(Indexed(), batch_size=5, shuffle=True))
    _save(out, "seen", module.seen)


def test_each_rank_reads_its_own_shard_reshuffled_each_epoch(tmp_path):
    spawn(_fit_shuffled, 2, args=(str(tmp_path),))
    seen = _load(tmp_path, "seen")
    for epoch in range(2):
        rank0, rank1 = seen[0][epoch], seen[1][epoch]
        assert not set(rank0) & set(rank1) and sorted(rank0 + rank1) == list(range(40))
    assert seen[0][0] != seen[0][1]  # set_epoch: a new order each epoch


# -------------------------------------------------------------------------------------- rank 0 writes, agreed stops
def _fit_with_checkpoints(out: str) -> None:
    root = os.path.join(out, f"root{os.environ['RANK']}")  # before the Trainer joins the group
    trainer = _trainer(root, enable_checkpointing=True)
    trainer.fit(Classifier(), make_loader())


def test_only_rank_zero_writes_checkpoints_and_tracks_the_run(tmp_path):
    spawn(_fit_with_checkpoints, 2, args=(str(tmp_path),))
    assert checkpoint_files(tmp_path / "root0" / "checkpoints") == ["checkpoint_8.pt"]
    assert not (tmp_path / "root1" / "checkpoints").exists() or not os.listdir(tmp_path / "root1" / "checkpoints")
    assert os.listdir(tmp_path / "root0" / "lightning_logs") == ["version_0"]  # one run per training job
    assert not (tmp_path / "root1" / "lightning_logs").exists()


class ScoredPerRank(Classifier):
    """Logs a score without sync_dist, so each rank holds its own: rank 1's says every epoch is a new best,
    rank 0's that only the first was."""

    def on_train_epoch_end(self):
        epoch = self.trainer.current_epoch
        self.log("score", float(epoch if dist.get_rank() == 1 else -epoch))


def _fit_monitoring_an_unsynced_score(out: str) -> None:
    from tracktrain.callbacks import ModelCheckpoint

    root = os.path.join(out, f"root{os.environ['RANK']}")
    checkpoint = ModelCheckpoint(monitor="score", mode="max", save_top_k=1)
    _trainer(root, max_epochs=3, callbacks=[checkpoint]).fit(ScoredPerRank(), make_loader())
    _save(out, "best", os.path.basename(checkpoint.best_model_path))


def test_a_score_that_differs_between_ranks_gives_one_save_decision_not_a_hang(tmp_path):
    # rank 1 would save after epochs 2 and 3 (gathering every rank's RNG state) while rank 0 skipped them
    spawn(_fit_monitoring_an_unsynced_score, 2, args=(str(tmp_path),))
    assert _load(tmp_path, "best") == ["checkpoint_4_score=0.0000.pt"] * 2  # rank 0's value decided, on both
    assert checkpoint_files(tmp_path / "root0" / "checkpoints") == ["checkpoint_4_score=0.0000.pt"]


class StopOnRankOne(Callback):
    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if dist.get_rank() == 1 and trainer.current_epoch == 1 and batch_idx == 0:
            # asked on one rank only, as Lightning code does (the setter is `trainer.stop()`, one implementation)
            trainer.should_stop = True
            assert trainer.should_stop  # this rank's request, until the ranks agree at the epoch's end


def _fit_stopping(out: str) -> None:
    trainer, module = _trainer(out, max_epochs=5, callbacks=[StopOnRankOne()]), Classifier()
    trainer.fit(module, make_loader())
    _save(out, "stopped", [trainer.train_engine.state.epoch, trainer.global_step])
    _save(out, "ranks", [trainer.is_global_zero, module.global_rank, module.local_rank])


def test_a_stop_asked_on_one_rank_stops_every_rank_at_the_same_step(tmp_path):
    # `trainer.should_stop = True` on rank 1 (issue 35: it was silently ignored)
    spawn(_fit_stopping, 2, args=(str(tmp_path),))
    assert _load(tmp_path, "stopped") == [[2, 8], [2, 8]]  # agreed at the end of epoch 2 (4 steps per epoch)
    assert _load(tmp_path, "ranks") == [[True, 0, 0], [False, 1, 1]]  # Lightning's rank properties


# ---------------------------------------------------------------------------------------------- a failing rank
class FailOnRankOne(Classifier):
    def train_step(self, batch, batch_idx):
        if dist.get_rank() == 1 and batch_idx == 2:
            raise RuntimeError("rank 1 failed")
        return super().train_step(batch, batch_idx)


def _fit_failing(out: str) -> None:
    _trainer(out, max_epochs=3).fit(FailOnRankOne(), make_loader())


def test_an_exception_on_one_rank_ends_the_run_on_all_ranks(tmp_path):
    started = time.monotonic()
    with pytest.raises(Exception, match="rank 1 failed"):
        spawn(_fit_failing, 2, args=(str(tmp_path),))
    assert time.monotonic() - started < 60  # not the 30-minute collective timeout


def test_ddp_without_a_process_group_says_how_to_start_one(tmp_path, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RuntimeError, match="torchrun --nproc_per_node N train.py"):
        _trainer(str(tmp_path)).fit(Classifier(), make_loader())


def test_torchrun_launches_a_ddp_fit(tmp_path):
    # past the deadline, the test fails with the stack of every rank and of torchrun
    result = _processes.run(_processes.torchrun(Path(__file__).with_name("_torchrun_script.py"), tmp_path), timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert ranks[0] == ranks[1] and ranks[0]["step"] == 8
    assert checkpoint_files(tmp_path / "checkpoints") == ["checkpoint_8.pt"]  # written once, by rank 0


# ------------------------------------------------------------------------------------- resume mid-epoch under DDP
class DropoutClassifier(Classifier):
    """Each step draws a dropout mask from its rank's generators, and rank 1 draws more than rank 0, so the ranks'
    generators differ: a resumed run trains the same only if every rank gets back its own generator states from the
    checkpoint (not rank 0's, which the engine's own state holds), deterministic=False included."""

    def train_step(self, batch, batch_idx):
        x, y = batch
        torch.rand(dist.get_rank() + 1)
        return super().train_step((F.dropout(x, 0.5), y), batch_idx)


def _fit_deterministic(out: str, name: str, crash_at: int | None, ckpt: str | None) -> None:
    from tracktrain.callbacks import ModelCheckpoint

    callbacks = [ModelCheckpoint(dirpath=os.path.join(out, "ckpt"), every_n_train_steps=3, save_top_k=None)]
    if crash_at is not None:
        callbacks.append(CrashAtStep(crash_at))
    module = DropoutClassifier()
    trainer = _trainer(out, max_epochs=2, seed=11, callbacks=callbacks)
    try:
        # a worker loads the batches: their seeds reach the worker's generators, so the steps' draws in this process
        # continue this rank's own generators, which only the checkpoint's per-rank states bring back
        loader = DataLoader(
            make_loader().dataset, batch_size=4, shuffle=True, num_workers=1, multiprocessing_context="fork"
        )
        trainer.fit(module, loader, ckpt_path=ckpt)
    except RuntimeError:
        return  # the "kill": every rank stops at the same step
    _save(out, name, _params(module))


def test_a_ddp_run_resumed_mid_epoch_ends_where_an_uninterrupted_one_does(tmp_path):
    spawn(_fit_deterministic, 2, args=(str(tmp_path / "full"), "params", None, None))
    spawn(_fit_deterministic, 2, args=(str(tmp_path / "cut"), "params", 10, None))  # 8 steps per epoch
    checkpoint = tmp_path / "cut" / "ckpt" / "checkpoint_9.pt"
    assert checkpoint.exists()
    spawn(_fit_deterministic, 2, args=(str(tmp_path / "cut"), "params", None, str(checkpoint)))
    full, resumed = _load(tmp_path / "full", "params"), _load(tmp_path / "cut", "params")
    assert resumed[0] == resumed[1] == full[0]


# ------------------------------------------------------------------------- ranks that loaded different checkpoints
def _resume_from_own_directory(out: str) -> None:
    """Each rank looks for checkpoints in a directory of its own, as on nodes without a shared disk: only rank 0's
    holds any (rank 0 writes), so rank 0 would resume at step 4 and rank 1 start over."""
    rank = int(os.environ["RANK"])  # the Trainer joins the process group when it fits
    _trainer(f"{out}/rank{rank}", max_epochs=1, enable_checkpointing=True).fit(Classifier(), make_loader())
    again = _trainer(f"{out}/rank{rank}", max_epochs=2, enable_checkpointing=True, resume="auto")
    try:
        again.fit(Classifier(), make_loader())
    except RuntimeError as error:
        _save(out, "error", str(error))


def test_ranks_that_resume_at_different_steps_refuse_to_train(tmp_path):
    spawn(_resume_from_own_directory, 2, args=(str(tmp_path),))
    errors = _load(tmp_path, "error")
    assert errors[0] == errors[1]
    assert "The ranks disagree on the global step after loading the checkpoint: [4, 0] (by rank)" in errors[0]
    assert "shared disk or an object store URL" in errors[0]


# --------------------------------------------------------------------------------- a non-finite loss on one rank
class NaNOnRankOne(Classifier):
    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def train_step(self, batch, batch_idx):
        loss = super().train_step(batch, batch_idx)
        return loss * float("nan") if dist.get_rank() == 1 and self.trainer.global_step + 1 == self.at else loss


def _fit_nan_on_rank_one(out: str, policy: str) -> None:
    module = NaNOnRankOne(at=3)
    trainer = _trainer(out, log_every_n_steps=2, nonfinite=policy)
    try:
        trainer.fit(module, make_loader())
    except FloatingPointError as error:
        _save(out, policy, {"error": str(error), "step": trainer.global_step})
        return
    finite = all(bool(torch.isfinite(p).all()) for p in module.parameters())
    _save(out, policy, {"finite": finite, "step": trainer.global_step, "params": _params(module)})


@pytest.mark.parametrize("policy", ["error", "skip_step"])
def test_a_non_finite_loss_on_one_rank_is_acted_on_by_both_at_the_same_step(tmp_path, policy):
    spawn(_fit_nan_on_rank_one, 2, args=(str(tmp_path), policy))
    outcomes = _load(tmp_path, policy)
    if policy == "error":  # rank 0's loss stayed finite, yet it stops too: no rank is left waiting
        assert outcomes[0]["step"] == outcomes[1]["step"] == 4  # the first logging step after step 3
        assert all("was NaN at step 3" in outcome["error"] for outcome in outcomes)
    else:  # both skipped the step (rank 1 alone would have left rank 0 in backward's all-reduce)
        assert outcomes[0]["finite"] and outcomes[0]["params"] == outcomes[1]["params"]
        assert outcomes[0]["step"] == outcomes[1]["step"] == 8


def test_the_shard_loader_keeps_every_option_of_the_users_loader():
    """strategy='ddp' rebuilds a DataLoader around a DistributedSampler: nothing else of it may change (a dropped
    multiprocessing_context started each pass's workers with spawn, seconds each)."""
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    from tracktrain.trainer.strategies import DDPStrategy

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        strategy = DDPStrategy()
        options = dict(
            batch_size=4,
            num_workers=1,
            multiprocessing_context="fork",
            drop_last=True,
            persistent_workers=True,
            prefetch_factor=3,
            in_order=False,
            timeout=7.0,
        )
        loader = DataLoader(list(range(32)), shuffle=True, **options)
        shard = strategy.distribute(loader, shuffle_default=False, seed=3)
    finally:
        dist.destroy_process_group()
    assert isinstance(shard.sampler, DistributedSampler) and shard.sampler.shuffle and shard.sampler.seed == 3
    for name, value in options.items():
        if name == "multiprocessing_context":
            assert shard.multiprocessing_context.get_start_method() == value
        else:
            assert getattr(shard, name) == value, name


# ------------------------------------------------------------------------- each rank resumes its own callback state
class CountsOnThisRank(Callback):
    """A callback whose state differs per rank (as an EarlyStopping's on a metric each rank computes alone)."""

    state_key = "CountsOnThisRank"

    def __init__(self):
        self.count = 0
        self.loaded = None

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.count += 1 + int(os.environ["RANK"]) * 100

    def state_dict(self):
        return {"count": self.count}

    def load_state_dict(self, state_dict):
        self.loaded = state_dict["count"]


def _fit_counting_per_rank(out: str) -> None:
    first = CountsOnThisRank()
    _trainer(out, max_epochs=1, enable_checkpointing=True, callbacks=[first]).fit(Classifier(), make_loader())
    again = CountsOnThisRank()
    _trainer(out, max_epochs=2, enable_checkpointing=True, resume="auto", callbacks=[again]).fit(
        Classifier(), make_loader()
    )
    _save(out, "counts", [first.count, again.loaded])


def test_each_rank_resumes_its_own_callback_state(tmp_path):
    spawn(_fit_counting_per_rank, 2, args=(str(tmp_path),))
    # 4 batches per rank in the first fit; rank 1 counts 101 per batch
    assert _load(tmp_path, "counts") == [[4, 4], [404, 404]]
