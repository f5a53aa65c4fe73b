"""A DataModule after its fit, as Lightning 2.6 has it (issue 35): `validate()`/`test()` without loaders do not take
the fit's datamodule unasked (Lightning 2.6 reads the module's own `val_dataloader()` then, and fails without one), and
the error says how to ask; the datamodule's `save_hyperparameters()` is part of the run's settings (the loggers'
params) beside the module's, compared on resume as a setting, not as the model."""

from __future__ import annotations

import pytest

from tracktrain import DataModule
from tracktrain.checkpoint.run_settings import changed_settings, check_resumable, run_settings
from tracktrain.loggers import Logger
from tracktrain.params import flatten_params
from tracktrain.trainer.datamodule import datamodule_settings

from ._tasks import Classifier, make_loader
from .test_lightning_habits import quiet_trainer


class Blobs(DataModule):
    def __init__(self, batch_size: int = 8, lr: float = 0.5) -> None:  # lr as the module's: another param here
        super().__init__()
        self.save_hyperparameters()

    def train_dataloader(self):
        return make_loader(batch_size=self.hparams.batch_size)

    def val_dataloader(self):
        return make_loader(n=16, seed=1)

    def test_dataloader(self):
        return make_loader(n=16, seed=2)


def test_validate_and_test_after_a_datamodule_fit_ask_for_it_as_lightning_does(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=1, num_sanity_val_steps=0)
    module, data = Classifier(), Blobs()
    trainer.fit(module, datamodule=data)
    for entry in (trainer.validate, trainer.test):
        with pytest.raises(ValueError, match=r"last fit's datamodule \(Blobs\).*datamodule=trainer.datamodule"):
            entry(module)
    assert trainer.datamodule is data
    assert "val_loss" in trainer.validate(module, datamodule=trainer.datamodule)[0]
    assert "val_loss" in trainer.test(datamodule=trainer.datamodule)[0]  # the fitted module, its datamodule


def test_a_datamodules_hparams_are_settings_of_their_own_beside_the_modules():
    assert datamodule_settings(None) == {}
    assert datamodule_settings(Blobs(batch_size=16)) == {
        "datamodule": {"batch_size": 16, "lr": 0.5},
        "datamodule/class": "Blobs",
    }

    class Bare(DataModule):  # no save_hyperparameters: its class only
        pass

    assert datamodule_settings(Bare()) == {"datamodule": {}, "datamodule/class": Bare.__qualname__}


def test_a_changed_datamodule_setting_is_reported_on_resume_not_refused_as_a_model_change():
    module = Classifier()
    before = {**run_settings(module, {"max_epochs": 2}), **datamodule_settings(Blobs(batch_size=8))}
    after = {**run_settings(module, {"max_epochs": 2}), **datamodule_settings(Blobs(batch_size=32))}
    changes = changed_settings(before, after)
    assert changes == {"datamodule/batch_size": (8, 32)}
    check_resumable(changes, "ckpt.pt", allowed=False)  # not the model's part: no ResumeMismatch
    assert {"datamodule/lr", "datamodule/class"} <= flatten_params(after).keys()  # the loggers' param names


class Params(Logger):
    name = "params"
    run_id = None

    def __init__(self) -> None:
        self.params: dict = {}

    def start(self, root_dir): ...
    def log_metrics(self, metrics, step): ...
    def finalize(self, status): ...

    def log_hyperparams(self, params):
        self.params.update(flatten_params(params))


def test_a_datamodules_hparams_reach_the_loggers(tmp_path):
    logger = Params()
    quiet_trainer(tmp_path, max_epochs=1, loggers=[logger]).fit(Classifier(), datamodule=Blobs(batch_size=16))
    assert logger.params["datamodule/batch_size"] == 16 and logger.params["datamodule/class"] == "Blobs"
