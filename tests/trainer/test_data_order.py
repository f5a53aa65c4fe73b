"""The order a fit reads its data in, as Lightning users rely on it: `seed_everything(42)` and then a shuffling loader
repeats the run (the data order included), and `limit_train_batches` starts each epoch from the loader's start
(Lightning restarts it; Ignite's engine would go on where the epoch before stopped) — also across a resume, mid-epoch
and at an epoch's end."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import tracktrain
from tracktrain import Callback, Trainer
from tracktrain.callbacks import ModelCheckpoint

from ._tasks import Classifier, CrashAtStep, quiet


def numbered_loader(shuffle: bool) -> DataLoader:
    """8 batches of 4 samples, sample i's features all equal to i (so a batch tells which samples it holds)."""
    x = torch.arange(32, dtype=torch.float32).unsqueeze(1).repeat(1, 4)
    y = (torch.arange(32) % 2).long()
    return DataLoader(TensorDataset(x, y), batch_size=4, shuffle=shuffle)


class Seen(Callback):
    """The samples of each training batch, in order."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.batches.append(batch[0][:, 0].long().tolist())


def order_of_a_run(tmp_path, module_seed: int | None = 0, **trainer_options) -> list[list[int]]:
    seen = Seen()
    Trainer(**quiet(tmp_path, max_epochs=2, callbacks=[seen], **trainer_options)).fit(
        Classifier(seed=module_seed), numbered_loader(True)
    )
    return seen.batches


def test_seed_everything_then_a_shuffling_loader_repeats_the_run(tmp_path):
    tracktrain.seed_everything(42)
    first = order_of_a_run(tmp_path / "a")
    tracktrain.seed_everything(42)
    assert order_of_a_run(tmp_path / "b") == first
    tracktrain.seed_everything(43)
    assert order_of_a_run(tmp_path / "c") != first  # the seed decides it


def test_a_script_that_seeds_torch_itself_repeats_its_runs_as_under_lightning(tmp_path, monkeypatch):
    """`torch.manual_seed(0)` at the top and no `seed=`: the run's seed is drawn from torch's generator, so the data
    order (and what each step draws: dropout) repeats, as Lightning's leaves torch's stream to decide it."""
    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)
    torch.manual_seed(7)
    first = order_of_a_run(tmp_path / "a")
    torch.manual_seed(7)
    assert order_of_a_run(tmp_path / "b") == first


def test_without_any_seed_each_run_draws_its_own_order(tmp_path, monkeypatch):
    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)
    torch.seed()  # torch's generator as a process that seeds nothing has it: seeded from the OS at start-up
    assert order_of_a_run(tmp_path / "a", module_seed=None) != order_of_a_run(tmp_path / "b", module_seed=None)


def test_limit_train_batches_starts_each_epoch_from_the_loaders_start_as_lightning(tmp_path):
    lightning = pytest.importorskip("lightning.pytorch")

    ours = Seen()
    trainer = Trainer(**quiet(tmp_path / "ours", max_epochs=3, limit_train_batches=3, callbacks=[ours]))
    trainer.fit(Classifier(), numbered_loader(False))

    class LightningSeen(lightning.Callback):
        def __init__(self) -> None:
            self.batches: list[list[int]] = []

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            self.batches.append(batch[0][:, 0].long().tolist())

    class LightningClassifier(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    theirs = LightningSeen()
    lightning.Trainer(
        max_epochs=3,
        limit_train_batches=3,
        callbacks=[theirs],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path / "lightning",
    ).fit(LightningClassifier(), numbered_loader(False))
    first_three = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert ours.batches == theirs.batches == first_three * 3


@pytest.mark.parametrize("crash_at", [5, 7], ids=["resumed-mid-epoch", "resumed-at-an-epochs-end"])
def test_a_resumed_run_with_limit_train_batches_reads_what_the_uninterrupted_one_read(tmp_path, crash_at):
    def run(root, callbacks):
        seen = Seen()
        checkpoint = ModelCheckpoint(dirpath=root / "ckpt", every_n_train_steps=2, save_top_k=-1)
        options = quiet(root, max_epochs=3, seed=5, resume="auto", limit_train_batches=3)
        trainer = Trainer(**{**options, "callbacks": [checkpoint, seen, *callbacks]})
        trainer.fit(Classifier(), numbered_loader(True))
        return seen.batches

    uninterrupted = run(tmp_path / "full", [])
    with pytest.raises(RuntimeError, match="killed"):
        run(tmp_path / "cut", [CrashAtStep(crash_at)])
    resumed = run(tmp_path / "cut", [])  # from step crash_at - 1: 4 is epoch 2's second batch, 6 epoch 2's end
    assert resumed == uninterrupted[crash_at - 1 :]
    epochs = [uninterrupted[i : i + 3] for i in (0, 3, 6)]
    assert epochs[0] != epochs[1] != epochs[2]  # each epoch a new pass, reshuffled
