"""`DataModule` and the Lightning habits around it (issue 35): a fit, validate, test or predict with a datamodule is
the same as with its loaders passed directly; `prepare_data` runs once per machine and `setup(stage)` on every rank;
the datamodule's state rides in the checkpoints; a module's own `*_dataloader()` methods are its data; bad input is an
error naming the fix."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch

from tracktrain import DataModule, LoopModule, Trainer
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.checkpoint.state import read_checkpoint
from tracktrain.distributed.collectives import spawn

from ._ddp import ddp_trainer, load_per_rank
from ._tasks import Classifier, make_loader


def quiet_trainer(root, **options) -> Trainer:
    options = {"enable_progress_bar": False, "enable_checkpointing": False, "loggers": False, "seed": 0, **options}
    return Trainer(default_root_dir=root, **{"max_epochs": 2, **options})


class Blobs(DataModule):
    """The task of `_tasks.make_loader`, made in `setup`; records every hook called, in order."""

    def __init__(self, n: int = 64, batch_size: int = 8, shuffle: bool = True) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.calls: list[str] = []
        self.epochs_seen = 0  # its state: saved with each checkpoint

    def prepare_data(self) -> None:
        self.calls.append("prepare_data")

    def setup(self, stage: str) -> None:
        self.calls.append(f"setup {stage}")
        hp = self.hparams
        self.train = make_loader(n=hp.n, batch_size=hp.batch_size, shuffle=hp.shuffle)
        self.val = make_loader(n=32, seed=1)

    def train_dataloader(self):
        self.calls.append("train_dataloader")
        return self.train

    def val_dataloader(self):
        self.calls.append("val_dataloader")
        return self.val

    def test_dataloader(self):
        self.calls.append("test_dataloader")
        return make_loader(n=24, seed=2)

    def predict_dataloader(self):
        self.calls.append("predict_dataloader")
        return [x for x, _ in make_loader(n=16, seed=3)]

    def teardown(self, stage: str) -> None:
        self.calls.append(f"teardown {stage}")

    def state_dict(self):
        self.calls.append("state_dict")
        return {"epochs_seen": self.epochs_seen}

    def load_state_dict(self, state_dict) -> None:
        self.calls.append("load_state_dict")
        self.epochs_seen = state_dict["epochs_seen"]


class CountsEpochs(Classifier):
    """Tells the fit's datamodule each epoch it finished (state a checkpoint must keep)."""

    def on_train_epoch_end(self) -> None:
        if self.trainer.datamodule is not None:
            self.trainer.datamodule.epochs_seen += 1


def _weights(module) -> dict:
    return {name: value.clone() for name, value in module.state_dict().items()}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ------------------------------------------------------------------------------------- the same as the loaders
def test_a_fit_with_a_datamodule_equals_the_fit_with_its_loaders_passed_directly(tmp_path):
    direct = Classifier()
    quiet_trainer(tmp_path / "a").fit(direct, make_loader(shuffle=True), make_loader(n=32, seed=1))
    datamodule, module = Blobs(), Classifier()
    trainer = quiet_trainer(tmp_path / "b")
    trainer.fit(module, datamodule=datamodule)
    assert _same(_weights(module), _weights(direct))
    assert trainer.datamodule is datamodule and datamodule.trainer is trainer
    assert datamodule.calls == ["prepare_data", "setup fit", "train_dataloader", "val_dataloader", "teardown fit"]
    assert trainer.global_step == 16 and "val_loss" in trainer.callback_metrics  # it validated, on its loader

    # validate, test and predict take it too, each stage set up and torn down
    datamodule.calls.clear()
    assert trainer.validate(module, datamodule=datamodule) == trainer.validate(module, make_loader(n=32, seed=1))
    assert trainer.test(module, datamodule=datamodule) == trainer.test(module, make_loader(n=24, seed=2))
    predictions = trainer.predict(module, datamodule=datamodule)
    assert all(torch.equal(a, b) for a, b in zip(predictions, trainer.predict(module, datamodule.predict_dataloader())))
    assert datamodule.calls[:12] == [
        *("prepare_data", "setup validate", "val_dataloader", "teardown validate"),
        *("prepare_data", "setup test", "test_dataloader", "teardown test"),
        *("prepare_data", "setup predict", "predict_dataloader", "teardown predict"),
    ]
    assert trainer.datamodule is None  # the last entry point ran without one


def test_a_datamodule_passed_in_the_loaders_place_is_taken_as_lightning_does(tmp_path):
    direct, module = Classifier(), Classifier()
    quiet_trainer(tmp_path / "a").fit(direct, make_loader(shuffle=True), make_loader(n=32, seed=1))
    trainer, datamodule = quiet_trainer(tmp_path / "b"), Blobs()
    trainer.fit(module, datamodule)  # Lightning's trainer.fit(model, dm)
    assert _same(_weights(module), _weights(direct)) and trainer.datamodule is datamodule
    assert trainer.test(module, datamodule) == trainer.test(module, make_loader(n=24, seed=2))


def test_save_hyperparameters_on_a_datamodule_is_the_modules(tmp_path):
    datamodule = Blobs(32, batch_size=4)
    assert datamodule.hparams == {"n": 32, "batch_size": 4, "shuffle": True} and datamodule.hparams.n == 32
    assert DataModule.save_hyperparameters is LoopModule.save_hyperparameters  # one implementation
    datamodule.hparams = {"n": 16}
    assert datamodule.hparams.n == 16


def test_teardown_runs_when_the_entry_point_fails(tmp_path):
    class Fails(Classifier):
        def train_step(self, batch, batch_idx):
            raise RuntimeError("boom")

    datamodule = Blobs()
    with pytest.raises(RuntimeError, match="boom"):
        quiet_trainer(tmp_path).fit(Fails(), datamodule=datamodule)
    assert datamodule.calls[-1] == "teardown fit"


# ------------------------------------------------------------------------------- a module with its own loaders
class WithLoaders(Classifier):
    """Lightning's other habit: the module gives its own loaders (made in its setup)."""

    def setup(self, stage: str) -> None:
        self.stages = [*getattr(self, "stages", []), stage]

    def train_dataloader(self):
        return make_loader(shuffle=True)

    def val_dataloader(self):
        return make_loader(n=32, seed=1)


def test_a_module_that_defines_its_loaders_is_fitted_without_any(tmp_path):
    direct = Classifier()
    quiet_trainer(tmp_path / "a").fit(direct, make_loader(shuffle=True), make_loader(n=32, seed=1))
    module = WithLoaders()
    trainer = quiet_trainer(tmp_path / "b")
    trainer.fit(module)
    assert _same(_weights(module), _weights(direct)) and "val_loss" in trainer.callback_metrics
    assert trainer.validate(module) == trainer.validate(module, make_loader(n=32, seed=1))
    assert module.stages == ["fit", "validate", "validate"]


def test_a_val_dataloader_without_eval_step_is_not_used_and_says_so(tmp_path):
    class NoEval(Blobs):
        pass

    class TrainOnly(LoopModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 2)

        def train_step(self, batch, batch_idx):
            return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    datamodule = NoEval()
    with pytest.warns(UserWarning, match=r"NoEval.val_dataloader\(\) is not used: TrainOnly defines no eval_step"):
        quiet_trainer(tmp_path).fit(TrainOnly(), datamodule=datamodule)
    assert "val_dataloader" not in datamodule.calls


# ------------------------------------------------------------------------------------------------ checkpoints
def test_the_datamodules_state_is_saved_in_checkpoints_and_restored_on_resume(tmp_path):
    checkpoints = ModelCheckpoint(dirpath=tmp_path / "ckpt")
    first = Blobs()
    quiet_trainer(tmp_path, callbacks=[checkpoints]).fit(CountsEpochs(), datamodule=first)
    assert first.epochs_seen == 2
    path = checkpoints.best_model_path
    assert read_checkpoint(path)["datamodule"] == {"epochs_seen": 2}

    resumed = Blobs()
    trainer = quiet_trainer(tmp_path, max_epochs=3, callbacks=[ModelCheckpoint(dirpath=tmp_path / "ckpt2")])
    trainer.fit(CountsEpochs(), datamodule=resumed, ckpt_path=path)
    assert resumed.epochs_seen == 3  # 2 restored (after its setup, as Lightning), then one more epoch
    assert resumed.calls.index("load_state_dict") > resumed.calls.index("setup fit")
    assert trainer.global_step == 24


def test_a_checkpoint_without_a_datamodule_resumes_with_one_that_keeps_its_state(tmp_path):
    checkpoints = ModelCheckpoint(dirpath=tmp_path / "ckpt")
    quiet_trainer(tmp_path, callbacks=[checkpoints]).fit(CountsEpochs(), make_loader(shuffle=True))
    assert "datamodule" not in read_checkpoint(checkpoints.best_model_path)
    datamodule = Blobs()
    datamodule.epochs_seen = 5
    trainer = quiet_trainer(tmp_path, max_epochs=3)
    trainer.fit(CountsEpochs(), datamodule=datamodule, ckpt_path=checkpoints.best_model_path)
    assert datamodule.epochs_seen == 6 and "load_state_dict" not in datamodule.calls and trainer.global_step == 24


# ------------------------------------------------------------------------------------------------ bad input
def test_loaders_and_a_datamodule_together_are_refused(tmp_path):
    trainer = quiet_trainer(tmp_path)
    with pytest.raises(ValueError, match=r"fit\(\) got train_dataloaders and a datamodule.*one or the other"):
        trainer.fit(Classifier(), make_loader(), datamodule=Blobs())
    with pytest.raises(ValueError, match=r"fit\(\) got val_dataloaders and a datamodule"):
        trainer.fit(Classifier(), val_dataloaders=make_loader(), datamodule=Blobs())
    with pytest.raises(ValueError, match=r"test\(\) got dataloaders and a datamodule"):
        trainer.test(Classifier(), make_loader(), datamodule=Blobs())


def test_a_datamodule_without_the_loader_an_entry_point_needs_is_refused(tmp_path):
    class ValOnly(DataModule):
        def val_dataloader(self):
            return make_loader()

    trainer = quiet_trainer(tmp_path)
    datamodule = ValOnly()
    with pytest.raises(ValueError, match=r"ValOnly defines no train_dataloader\(\), which fit needs.*Define"):
        trainer.fit(Classifier(), datamodule=datamodule)
    with pytest.raises(ValueError, match=r"ValOnly defines no test_dataloader\(\).*or pass dataloaders="):
        trainer.test(Classifier(), datamodule=datamodule)
    assert trainer.validate(Classifier(), datamodule=datamodule)[0]["val_loss"] > 0  # the one it has


@pytest.mark.parametrize("wrong", [make_loader(), {"train": make_loader()}, "data"])
def test_a_datamodule_that_is_not_one_is_refused(tmp_path, wrong):
    with pytest.raises(TypeError, match=r"fit\(datamodule=\.\.\.\) takes a tracktrain.DataModule.*Subclass"):
        quiet_trainer(tmp_path).fit(Classifier(), datamodule=wrong)


def test_no_data_at_all_and_a_loader_method_returning_none_are_refused(tmp_path):
    trainer = quiet_trainer(tmp_path)
    with pytest.raises(ValueError, match=r"train_dataloaders is required.*datamodule=.*train_dataloader\(self\)"):
        trainer.fit(Classifier())
    with pytest.raises(ValueError, match=r"dataloaders is required.*predict_dataloader\(self\) on Classifier"):
        trainer.predict(Classifier())

    class ReturnsNone(Blobs):
        def train_dataloader(self):
            return None

    datamodule = ReturnsNone()
    with pytest.raises(TypeError, match=r"ReturnsNone.train_dataloader\(\) returned None; it must return a DataLoader"):
        trainer.fit(Classifier(), datamodule=datamodule)
    assert datamodule.calls[-1] == "teardown fit"


# ---------------------------------------------------------------------------------------------- under DDP
def save_per_rank(out: str, name: str, value) -> None:
    """`value` as `<out>/<name>_rank<RANK>.json` (read back by `load_per_rank`), with or without a process group."""
    Path(out, f"{name}_rank{os.environ['RANK']}.json").write_text(json.dumps(value))


class Prepared(DataModule):
    """Writes its data to its machine's disk in prepare_data (slowly: the other rank must wait for it), reads it in
    setup; records what ran on each rank."""

    def __init__(self, out: str, name: str, disk: str, per_node: bool = True) -> None:
        super().__init__()
        self.out, self.name, self.prepare_data_per_node = out, name, per_node
        self.data = Path(out, f"{name}_{disk}.pt")

    def prepare_data(self) -> None:
        time.sleep(0.3)
        save_per_rank(self.out, f"{self.name}_prepared", True)
        torch.save(make_loader(n=32).dataset, self.data)

    def setup(self, stage: str) -> None:  # fails unless this machine's prepare_data ran before
        self.loader = torch.utils.data.DataLoader(torch.load(self.data, weights_only=False), batch_size=8)
        save_per_rank(self.out, f"{self.name}_setup", stage)

    def train_dataloader(self):
        return self.loader


class FailsToPrepare(DataModule):
    def prepare_data(self) -> None:
        raise OSError("download failed")

    def train_dataloader(self):
        return make_loader()


def _ddp_datamodules(out: str) -> None:
    rank, local_rank = os.environ["RANK"], os.environ["LOCAL_RANK"]
    # one machine (LOCAL_RANK 0 and 1, one disk); two machines (LOCAL_RANK 0 on each, a disk each); two machines
    # sharing a disk, prepare_data_per_node = False
    for name, machines, disk, per_node in [("one_machine", 1, "disk", True), ("two_machines", 2, f"disk{rank}", True),
                                           ("shared_disk", 2, "disk", False)]:  # fmt: skip
        os.environ["LOCAL_RANK"] = local_rank if machines == 1 else "0"
        try:
            ddp_trainer(out, max_epochs=1).fit(Classifier(), datamodule=Prepared(out, name, disk, per_node))
        finally:
            os.environ["LOCAL_RANK"] = local_rank
    try:
        ddp_trainer(out, max_epochs=1).fit(Classifier(), datamodule=FailsToPrepare())
    except Exception as error:  # every rank stops: the one that failed with its error, the others told so
        save_per_rank(out, "failure", f"{type(error).__name__}: {error}")


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_prepare_data_runs_once_per_machine_and_setup_on_every_rank_under_ddp(tmp_path):
    spawn(_ddp_datamodules, 2, args=(str(tmp_path),))
    prepared = {name: sorted(p.name for p in tmp_path.glob(f"{name}_prepared_rank*")) for name in
                ("one_machine", "two_machines", "shared_disk")}  # fmt: skip
    assert prepared["one_machine"] == ["one_machine_prepared_rank0.json"]  # LOCAL_RANK 0 only
    assert len(prepared["two_machines"]) == 2  # the first process of each machine
    assert prepared["shared_disk"] == ["shared_disk_prepared_rank0.json"]  # prepare_data_per_node = False
    assert load_per_rank(tmp_path, "one_machine_setup") == ["fit", "fit"]  # every rank, after rank 0 wrote the data
    assert load_per_rank(tmp_path, "two_machines_setup") == load_per_rank(tmp_path, "shared_disk_setup") == ["fit"] * 2
    failures = load_per_rank(tmp_path, "failure")
    assert failures[0] == "OSError: download failed"
    assert failures[1].startswith("RuntimeError: prepare_data() failed on another process")
