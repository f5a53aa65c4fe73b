"""Several validation, test and predict loaders, as Lightning (issue 35): `fit(model, train, [val_a, val_b])`,
`validate(model, [a, b])`, a datamodule's list; read one after the other in one pass, the step given each batch's
`dataloader_idx`, what it logs named `name/dataloader_idx_N`, one result per loader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from tracktrain import DataModule, LoopModule
from tracktrain.distributed.collectives import spawn

from ._tasks import Classifier, make_loader
from .test_lightning_habits import quiet_trainer


def ramp(start: float, n: int, batch_size: int = 2) -> DataLoader:
    """Inputs start, start+1, ...: a batch's mean input tells which loader and which batch it is."""
    x = torch.arange(start, start + n, dtype=torch.float32).unsqueeze(1)
    return DataLoader(TensorDataset(x), batch_size=batch_size)


class Recorder(LoopModule):
    """Logs each batch's mean input; records the steps' arguments and the epoch hooks."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(1, 1)
        self.calls: list = []

    def train_step(self, batch, batch_idx):
        return self.net(batch[0]).pow(2).mean()

    def eval_step(self, batch, batch_idx, dataloader_idx=0):
        self.calls.append((batch_idx, dataloader_idx, batch[0].mean().item()))
        self.log("x", batch[0].mean())

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        self.log("t", batch[0].mean())

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        return (dataloader_idx, batch_idx)

    def on_validation_epoch_start(self):
        self.calls.append("epoch start")

    def on_validation_epoch_end(self):
        self.calls.append("epoch end")
        self.log("epoch_hook", 7.0)  # outside the steps: every loader's, not suffixed

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def test_a_fit_validates_on_each_loader_in_turn_with_its_index_and_names_their_values_by_it(tmp_path):
    module = Recorder()
    trainer = quiet_trainer(tmp_path, max_epochs=1, num_sanity_val_steps=1)
    trainer.fit(module, ramp(0, 4), [ramp(0, 4), ramp(100, 6)])
    sanity = ["epoch start", (0, 0, 0.5), (0, 1, 100.5), "epoch end"]  # one batch of each loader, as Lightning
    one_pass = ["epoch start", (0, 0, 0.5), (1, 0, 2.5), (0, 1, 100.5), (1, 1, 102.5), (2, 1, 104.5), "epoch end"]
    assert module.calls == sanity + one_pass  # batch_idx counted within each loader; the epoch hooks once
    metrics = trainer.callback_metrics
    assert float(metrics["x/dataloader_idx_0"]) == 1.5 and float(metrics["x/dataloader_idx_1"]) == 102.5
    assert "x" not in metrics and float(metrics["epoch_hook"]) == 7.0
    assert {"x/dataloader_idx_0", "x/dataloader_idx_1", "epoch_hook"} <= trainer.logged_metrics.keys()


def test_one_loader_keeps_the_two_argument_step_and_plain_names(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=1, num_sanity_val_steps=0)
    trainer.fit(Classifier(), make_loader(), make_loader())  # eval_step(self, batch, batch_idx)
    assert "val_loss" in trainer.callback_metrics
    assert trainer.evaluation.results({"val_loss": 1.0}) == [{"val_loss": 1.0}]


def test_limits_and_sanity_batches_count_per_loader(tmp_path):
    module = Recorder()
    trainer = quiet_trainer(tmp_path, max_epochs=1, num_sanity_val_steps=2, limit_val_batches=1)
    trainer.fit(module, ramp(0, 4), [ramp(0, 6), ramp(100, 6)])
    steps = [call for call in module.calls if isinstance(call, tuple)]
    assert steps == [(0, 0, 0.5), (0, 1, 100.5)] * 2  # the sanity check's and the epoch's: 1 of each (the limit)


def test_validate_and_test_split_their_values_per_loader_as_lightning_returns_them(tmp_path):
    module = Recorder()
    trainer = quiet_trainer(tmp_path)
    trainer.validate(module, [ramp(0, 4), ramp(10, 2)])
    assert trainer.evaluation.results({"x/dataloader_idx_0": 1.5, "x/dataloader_idx_1": 10.5, "epoch_hook": 7.0}) == [
        {"x/dataloader_idx_0": 1.5, "epoch_hook": 7.0},
        {"x/dataloader_idx_1": 10.5, "epoch_hook": 7.0},
    ]
    trainer.test(module, {"a": ramp(0, 4), "b": ramp(10, 2)})  # a dict: its loaders in its order
    metrics = trainer.callback_metrics
    assert float(metrics["t/dataloader_idx_0"]) == 1.5 and float(metrics["t/dataloader_idx_1"]) == 10.5


def test_validate_returns_one_dict_per_loader(tmp_path):
    results = quiet_trainer(tmp_path).validate(Recorder(), [ramp(0, 4), ramp(10, 2)])
    assert results == [{"x/dataloader_idx_0": 1.5, "epoch_hook": 7.0}, {"x/dataloader_idx_1": 10.5, "epoch_hook": 7.0}]


def test_predict_returns_one_list_per_loader(tmp_path):
    trainer = quiet_trainer(tmp_path)
    assert trainer.predict(Recorder(), [ramp(0, 4), ramp(10, 2)]) == [[(0, 0), (0, 1)], [(1, 0)]]
    assert trainer.predict(Recorder(), ramp(0, 4)) == [(0, 0), (0, 1)]  # one loader: one list, no index

    class Plain(LoopModule):  # the default predict_step (self(batch)) under several loaders
        def forward(self, batch):
            return batch[0].sum().item()

    assert trainer.predict(Plain(), [ramp(0, 2), ramp(10, 2)]) == [[1.0], [21.0]]


def test_a_step_without_dataloader_idx_under_several_loaders_is_refused_with_the_fix(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=1)
    with pytest.raises(TypeError, match=r"2 validation loaders.*Classifier.eval_step\(\) takes no dataloader_idx.*"):
        trainer.fit(Classifier(), make_loader(), [make_loader(), make_loader()])

    class RequiredIndex(Classifier):
        def eval_step(self, batch, batch_idx, dataloader_idx):
            pass

    with pytest.raises(TypeError, match="dataloader_idx without a default.*dataloader_idx=0"):
        trainer.validate(RequiredIndex(), make_loader())


class TwoValidationSets(DataModule):
    def train_dataloader(self):
        return ramp(0, 4)

    def val_dataloader(self):
        return [ramp(0, 2), ramp(50, 2)]


def test_a_datamodule_may_give_several_validation_loaders(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=1, num_sanity_val_steps=0)
    trainer.fit(Recorder(), datamodule=TwoValidationSets())
    assert float(trainer.callback_metrics["x/dataloader_idx_1"]) == 50.5
    # several training loaders: Lightning's CombinedLoader, tests/trainer/test_combined_training.py


class SyncedMean(LoopModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(1, 1)

    def eval_step(self, batch, batch_idx, dataloader_idx=0):
        self.log("x", batch[0].mean(), sync_dist=True)
        self.log("seen", float(batch[0].shape[0]), reduce="sum", sync_dist=True)


def _validate_two_loaders_on_two_ranks(out: str) -> None:
    import torch.distributed as dist

    trainer = quiet_trainer(out, strategy="ddp", accelerator="cpu")
    trainer.validate(SyncedMean(), [ramp(0, 8), ramp(100, 4)])
    values = {name: float(value) for name, value in trainer.callback_metrics.items()}
    Path(out, f"rank{dist.get_rank()}.json").write_text(json.dumps(values))


@pytest.mark.distributed
def test_under_ddp_each_loader_is_sharded_across_the_ranks_and_its_values_agreed(tmp_path):
    spawn(_validate_two_loaders_on_two_ranks, 2, args=(str(tmp_path),))
    expected = {"x/dataloader_idx_0": 3.5, "seen/dataloader_idx_0": 8.0}
    expected |= {"x/dataloader_idx_1": 101.5, "seen/dataloader_idx_1": 4.0}
    for rank in range(2):  # each rank read its half of each loader; every sample counted once
        assert json.loads((tmp_path / f"rank{rank}.json").read_text()) == expected


def test_the_step_loss_of_a_classifier_is_unchanged_by_a_second_loader(tmp_path):
    """The suffix is a name, not another value: each loader's mean equals its own one-loader validation."""

    class Indexed(Classifier):
        def eval_step(self, batch, batch_idx, dataloader_idx=0):
            x, y = batch
            self.log("val_loss", F.cross_entropy(self(x), y))

    a, b = make_loader(seed=1), make_loader(seed=2, n=24)
    trainer = quiet_trainer(tmp_path)
    trainer.validate(Indexed(), [a, b])
    together = {name: float(value) for name, value in trainer.callback_metrics.items()}
    alone = [quiet_trainer(tmp_path).validate(Indexed(), loader)[0]["val_loss"] for loader in (a, b)]
    assert together["val_loss/dataloader_idx_0"] == pytest.approx(alone[0])
    assert together["val_loss/dataloader_idx_1"] == pytest.approx(alone[1])


def test_batch_hooks_under_several_loaders_get_the_index_within_the_loader_and_the_loaders(tmp_path):
    """As Lightning: under several loaders a batch hook gets `batch_idx` within the batch's loader and that loader's
    `dataloader_idx` (one loader: two arguments, as before); a hook with no room for the index is refused before the
    pass, naming the fix."""
    from tracktrain import Callback

    class Hooked(Recorder):
        def on_validation_batch_start(self, batch, batch_idx, dataloader_idx=0):
            self.calls.append(("start", batch_idx, dataloader_idx))

    class Watch(Callback):
        def __init__(self) -> None:
            self.seen: list = []

        def on_validation_batch_end(self, trainer, module, outputs, batch, batch_idx, dataloader_idx=0):
            self.seen.append((batch_idx, dataloader_idx, batch[0].mean().item()))

    module, watch = Hooked(), Watch()
    quiet_trainer(tmp_path, callbacks=[watch]).validate(module, [ramp(0, 4), ramp(10, 2)])
    assert [call[1:] for call in module.calls if call[0] == "start"] == [(0, 0), (1, 0), (0, 1)]
    assert watch.seen == [(0, 0, 0.5), (1, 0, 2.5), (0, 1, 10.5)]

    class Old(Recorder):
        def on_validation_batch_start(self, batch, batch_idx):
            pass

    with pytest.raises(TypeError, match=r"Old.on_validation_batch_start\(\) takes no dataloader_idx"):
        quiet_trainer(tmp_path).validate(Old(), [ramp(0, 4), ramp(10, 2)])
    quiet_trainer(tmp_path).validate(Old(), ramp(0, 4))  # one loader: called with (batch, batch_idx)
