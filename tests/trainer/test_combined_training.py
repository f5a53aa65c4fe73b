"""Several training loaders, Lightning's way: a dict, list or tuple of DataLoaders given to `fit` is one
`CombinedLoader(mode="max_size_cycle")`, and a `CombinedLoader` of any training mode trains on a batch of each loader
per step — the same batches, steps and losses as Lightning (its Trainer as the oracle). Beyond Lightning: a run
killed mid-epoch, after a loader started again, resumes exactly; under DDP each loader is sharded."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from tracktrain import LoopModule, Trainer
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.distributed.collectives import spawn
from tracktrain.utilities import CombinedLoader

from ._ddp import ddp_trainer, load_per_rank, save_per_rank
from ._tasks import CrashAtStep, quiet


class Numbered(Dataset):
    """Sample i: features from i, a target, and i itself (so a batch tells which samples it holds)."""

    def __init__(self, n: int, offset: int = 0) -> None:
        self.n, self.offset = n, offset

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        i = index + self.offset
        return torch.full((4,), i / 100.0), torch.tensor(i % 2), torch.tensor(i)


def loaders(shuffle: bool = False, structure: str = "dict"):
    """a: 3 batches of 4, b: 5 batches of 4."""
    a = DataLoader(Numbered(12), batch_size=4, shuffle=shuffle)
    b = DataLoader(Numbered(20, offset=100), batch_size=4, shuffle=shuffle)
    return {"a": a, "b": b} if structure == "dict" else [a, b] if structure == "list" else (a, b)


def parts(batch):
    return list(batch.values()) if isinstance(batch, dict) else list(batch)


def samples(batch) -> list[list[int] | None]:
    return [None if part is None else part[2].tolist() for part in parts(batch)]


def combined_loss(net: nn.Module, batch) -> torch.Tensor:
    losses = [F.cross_entropy(net(part[0]), part[1]) for part in parts(batch) if part is not None]
    return torch.stack(losses).sum()


class SeesCombined:
    """The module both Trainers train (a mixin before each one's module class): records each step's samples and
    loss."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Linear(4, 2)
        self.seen: list[list[list[int] | None]] = []
        self.losses: list[float] = []

    def step(self, batch) -> torch.Tensor:
        self.seen.append(samples(batch))
        loss = combined_loss(self.net, batch)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Combined(SeesCombined, LoopModule):
    def train_step(self, batch, batch_idx):
        return self.step(batch)


def lightning_run(tmp_path, train, max_epochs=2):
    lightning = pytest.importorskip("lightning.pytorch")

    class LightningCombined(SeesCombined, lightning.LightningModule):
        def training_step(self, batch, batch_idx):
            return self.step(batch)

    module = LightningCombined()
    trainer = lightning.Trainer(
        max_epochs=max_epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(module, train)
    return module, trainer


def lightning_combined(train, mode):
    return pytest.importorskip("lightning.pytorch.utilities").CombinedLoader(train, mode)


CASES = {
    "dict": lambda make: make("dict"),
    "list": lambda make: make("list"),
    "tuple": lambda make: make("tuple"),
    "min_size": lambda make: ("min_size", make("dict")),
    "max_size_cycle": lambda make: ("max_size_cycle", make("dict")),
    "max_size": lambda make: ("max_size", make("dict")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_several_training_loaders_train_on_the_batches_lightning_trains_on(tmp_path, case):
    def given(combine):
        train = CASES[case](lambda structure: loaders(structure=structure))
        return combine(train[1], train[0]) if isinstance(train, tuple) and isinstance(train[0], str) else train

    theirs, lightning_trainer = lightning_run(tmp_path / "lightning", given(lightning_combined))
    ours = Combined()
    trainer = Trainer(**quiet(tmp_path / "ours", max_epochs=2, logger=False))
    trainer.fit(ours, given(CombinedLoader))

    assert ours.seen == theirs.seen
    assert ours.losses == pytest.approx(theirs.losses, abs=1e-6)
    assert trainer.global_step == lightning_trainer.global_step == len(theirs.seen)
    if case == "max_size_cycle":
        assert [step[0] for step in ours.seen][3:5] == [[0, 1, 2, 3], [4, 5, 6, 7]]  # a started again
    if case == "max_size":
        assert [step[0] for step in ours.seen][3:5] == [None, None]  # a dry: None, as in Lightning


def test_estimated_stepping_batches_count_the_combined_length(tmp_path):
    class Estimating(Combined):
        def configure_optimizers(self):
            self.estimated = self.trainer.estimated_stepping_batches
            return super().configure_optimizers()

    for mode, per_epoch in (("min_size", 3), ("max_size_cycle", 5)):
        module = Estimating()
        Trainer(**quiet(tmp_path / mode, max_epochs=2, logger=False)).fit(module, CombinedLoader(loaders(), mode))
        assert module.estimated == 2 * per_epoch == len(module.seen)


@pytest.mark.parametrize(
    ("mode", "crash_at"),
    [("max_size_cycle", 5), ("max_size_cycle", 7), ("max_size_cycle", 11), ("min_size", 5), ("max_size", 9)],
    ids=["after-a-restart", "mid-epoch", "at-an-epochs-end", "min_size", "max_size-after-dry"],
)
def test_a_killed_run_over_combined_shuffled_loaders_resumes_exactly(tmp_path, mode, crash_at):
    """Saved every 2 steps; max_size_cycle: 5 steps an epoch, a (3 batches) starts again at each epoch's 4th step, so
    step 4's checkpoint is inside a's second start of the pass."""

    def run(root, callbacks):
        module = Combined()
        checkpoint = ModelCheckpoint(dirpath=root / "ckpt", every_n_train_steps=2, save_top_k=-1)
        options = quiet(root, max_epochs=3, seed=5, resume="auto", logger=False)
        trainer = Trainer(**{**options, "callbacks": [checkpoint, *callbacks]})
        trainer.fit(module, CombinedLoader(loaders(shuffle=True), mode))
        return module

    uninterrupted = run(tmp_path / "full", [])
    with pytest.raises(RuntimeError, match="killed"):
        run(tmp_path / "cut", [CrashAtStep(crash_at)])
    resumed = run(tmp_path / "cut", [])  # from the checkpoint of step crash_at - 1
    assert resumed.seen == uninterrupted.seen[crash_at - 1 :]
    assert resumed.losses == uninterrupted.losses[crash_at - 1 :]
    assert torch.equal(resumed.net.weight, uninterrupted.net.weight)
    first_epoch_a = [step[0] for step in uninterrupted.seen[:3]]
    assert first_epoch_a != [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]  # shuffled


def test_sequential_mode_is_refused_for_training_as_lightning_does_and_reads_as_several_validation_loaders(tmp_path):
    with pytest.raises(ValueError, match=r'CombinedLoader\(mode="sequential"\).*together.*min_size'):
        Trainer(**quiet(tmp_path, max_epochs=1)).fit(Combined(), CombinedLoader(loaders(), "sequential"))

    class Validated(Combined):
        def eval_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("val_loss", F.cross_entropy(self.net(batch[0]), batch[1]))

    def validate(val):
        trainer = Trainer(**quiet(tmp_path / "v", logger=False))
        return trainer.validate(Validated(), val)

    as_list = validate([loaders()["a"], loaders()["b"]])
    assert validate(CombinedLoader([loaders()["a"], loaders()["b"]], "sequential")) == as_list
    assert len(as_list) == 2


def test_a_combined_validation_loader_of_another_mode_is_one_loader_of_combined_batches(tmp_path):
    class Validated(Combined):
        def eval_step(self, batch, batch_idx):
            self.val_seen = [*getattr(self, "val_seen", []), samples(batch)]
            self.log("val_loss", combined_loss(self.net, batch))

    module = Validated()
    results = Trainer(**quiet(tmp_path, logger=False)).validate(module, CombinedLoader(loaders(), "min_size"))
    assert len(results) == 1 and "val_loss" in results[0]
    assert [step[0] for step in module.val_seen] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]


def test_a_datamodule_or_module_giving_a_dict_of_training_loaders_trains_on_it(tmp_path):
    class Giving(Combined):
        def train_dataloader(self):
            return loaders()

    module = Giving()
    Trainer(**quiet(tmp_path, max_epochs=1, logger=False)).fit(module)
    assert len(module.seen) == 5 and module.seen[3][0] == [0, 1, 2, 3]


def test_overfit_batches_takes_the_first_batches_of_each_loader(tmp_path):
    module = Combined()
    Trainer(**quiet(tmp_path, max_epochs=2, overfit_batches=2, logger=False)).fit(module, loaders(shuffle=True))
    first_two = [[[0, 1, 2, 3], [100, 101, 102, 103]], [[4, 5, 6, 7], [104, 105, 106, 107]]]
    assert module.seen == first_two * 2


# ------------------------------------------------------------------------------------------------------- DDP
def _fit_combined_ddp(out: str) -> None:
    module = Combined()
    ddp_trainer(out, max_epochs=1, seed=3, logger=False).fit(module, loaders(shuffle=True))
    save_per_rank(out, "seen", module.seen)


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_under_ddp_each_loader_is_sharded_between_the_ranks(tmp_path):
    spawn(_fit_combined_ddp, 2, args=(str(tmp_path),))
    seen = load_per_rank(tmp_path, "seen")
    assert len(seen[0]) == len(seen[1]) == 3  # b: 20 samples / 2 ranks / 4 a batch (the longest), a cycled
    for loader, size in ((0, 12), (1, 20)):
        first_pass = [sample for rank in seen for step in rank[: 2 if loader == 0 else 3] for sample in step[loader]]
        offset = 0 if loader == 0 else 100
        assert sorted(first_pass) == list(range(offset, offset + size))  # every sample once, on one rank


def test_a_nested_collection_of_training_loaders_is_combined_as_lightning_combines_it(tmp_path):
    """Lightning's docs' `{"a": [dl1, dl2], "b": dl3}`: the batch has the collection's structure."""

    def nested():
        a, b = loaders()["a"], loaders()["b"]
        return {"a": [a, b], "b": loaders()["b"]}

    def ids(batch):
        return [batch["a"][0][2].tolist(), batch["a"][1][2].tolist(), batch["b"][2].tolist()]

    class Nested(Combined):
        def train_step(self, batch, batch_idx):
            self.seen.append(ids(batch))
            return combined_loss(self.net, [batch["a"][0], batch["a"][1], batch["b"]])

    lightning = pytest.importorskip("lightning.pytorch")

    class LightningNested(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(4, 2)
            self.seen: list = []

        def training_step(self, batch, batch_idx):
            self.seen.append(ids(batch))
            return combined_loss(self.net, [batch["a"][0], batch["a"][1], batch["b"]])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    theirs = LightningNested()
    lightning.Trainer(
        max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False, default_root_dir=tmp_path
    ).fit(theirs, nested())
    ours = Nested()
    Trainer(**quiet(tmp_path / "ours", max_epochs=1, logger=False)).fit(ours, nested())
    assert ours.seen == theirs.seen and len(ours.seen) == 5
