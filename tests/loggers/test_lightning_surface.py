"""The loggers as Lightning programs use them: `trainer.logger`, `self.logger` and `trainer.log_dir`; each logger's
`experiment` (the tracker's own object), `log_hyperparams`, `log_metrics`, `name`, `version`, `save_dir`, `log_dir`;
`CSVLogger(save_dir, name, version)` with Lightning's files, read back with pandas as Lightning users do (Lightning
2.6 is the oracle for the layout); `from tracktrain.loggers import TensorBoardLogger, MLFlowLogger, WandbLogger`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tracktrain import Trainer
from tracktrain.loggers import CSVLogger

from ..trainer._tasks import Classifier, make_loader, quiet


class UsesItsLogger(Classifier):
    """What Lightning programs do with `self.logger` during a fit."""

    def on_train_start(self):
        self.logger.log_hyperparams({"extra": 3})
        self.seen = (self.logger is self.trainer.logger, self.logger.log_dir)

    def on_validation_epoch_end(self):
        experiment = self.logger.experiment
        if hasattr(experiment, "add_image"):  # TensorBoard's SummaryWriter
            experiment.add_image("sample", torch.zeros(3, 4, 4), self.global_step)


def read_metrics(log_dir):
    pandas = pytest.importorskip("pandas")
    return pandas.read_csv(os.path.join(log_dir, "metrics.csv"))


def test_the_default_logger_is_lightnings_csv_logger_with_its_layout_without_tensorboard(tmp_path, without_tensorboard):
    module = UsesItsLogger()
    trainer = Trainer(**{**quiet(tmp_path, max_epochs=2, log_every_n_steps=4), "enable_progress_bar": False})
    assert trainer.logger is trainer.loggers[0] and isinstance(trainer.logger, CSVLogger)
    trainer.fit(module, make_loader(), make_loader())
    log_dir = tmp_path / "lightning_logs" / "version_0"
    assert module.seen == (True, str(log_dir)) and trainer.log_dir == str(log_dir)
    assert trainer.logger.name == "lightning_logs" and trainer.logger.version == 0
    assert trainer.logger.save_dir == str(tmp_path)
    metrics = read_metrics(log_dir)
    # one row per logged step, a column per metric, with step and epoch: what Lightning users group and plot by
    assert metrics.dropna(subset=["train_loss"])["step"].tolist() == [4, 8, 12, 16]
    assert metrics.dropna(subset=["val_loss"])["epoch"].tolist() == [0, 1]
    assert metrics.groupby("epoch")["train_loss"].count().tolist() == [2, 2]
    hparams = (log_dir / "hparams.yaml").read_text()
    assert "extra: 3" in hparams  # what the module's hook logged


def test_with_tensorboard_installed_the_default_logger_is_tensorboards_as_in_lightning(tmp_path):
    """Lightning's rule (its default logger is TensorBoard's where the package is installed): a program's
    `self.logger.experiment.add_image(...)` finds the SummaryWriter, as in the GAN and autoencoder tutorials."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing import event_accumulator

    from tracktrain.loggers import TensorBoardLogger

    module = UsesItsLogger()
    trainer = Trainer(**quiet(tmp_path, max_epochs=2, log_every_n_steps=4))
    assert isinstance(trainer.logger, TensorBoardLogger)
    trainer.fit(module, make_loader(), make_loader())
    log_dir = tmp_path / "lightning_logs" / "version_0"
    assert module.seen == (True, str(log_dir)) and trainer.log_dir == str(log_dir)
    events = event_accumulator.EventAccumulator(str(log_dir))
    events.Reload()
    assert [event.step for event in events.Scalars("train_loss")] == [4, 8, 12, 16]
    assert [event.step for event in events.Scalars("val_loss")] == [8, 16]
    assert "sample" in events.Tags()["images"]  # the module's add_image, once per validation
    assert "extra: 3" in (log_dir / "hparams.yaml").read_text()
    assert (log_dir / "status.txt").read_text().strip() == "FINISHED"


def test_csv_logger_takes_lightnings_arguments_and_matches_its_files(tmp_path):
    lightning = pytest.importorskip("lightning.pytorch")
    ours = CSVLogger(tmp_path / "ours", name="exp", version=3, prefix="run")
    Trainer(**{**quiet(tmp_path, max_epochs=1, log_every_n_steps=4), "loggers": [ours]}).fit(
        Classifier(), make_loader()
    )
    assert ours.log_dir == str(tmp_path / "ours" / "exp" / "version_3")
    assert "run-train_loss" in read_metrics(ours.log_dir).columns

    class LightningClassifier(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            loss = torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    theirs = lightning.loggers.CSVLogger(tmp_path / "theirs", name="exp", version=3)
    lightning.Trainer(
        max_epochs=1, log_every_n_steps=4, logger=theirs, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=tmp_path,
    ).fit(LightningClassifier(), make_loader())  # fmt: skip
    files = {path.name for path in Path(theirs.log_dir).iterdir()}
    assert files <= {path.name for path in Path(ours.log_dir).iterdir()}  # metrics.csv, hparams.yaml
    their_columns = set(read_metrics(theirs.log_dir).columns)
    our_columns = {name.removeprefix("run-") for name in read_metrics(ours.log_dir).columns}
    assert their_columns <= our_columns  # epoch, step, train_loss (ours adds samples_seen)
    # the same rows; a row's step is the optimizer steps taken here, the step's index in Lightning (one less)
    their_steps, our_steps = read_metrics(theirs.log_dir)["step"], read_metrics(ours.log_dir)["step"]
    assert (their_steps + 1).tolist() == our_steps.tolist() == [4, 8]


def test_a_resumed_run_appends_to_its_version_and_a_new_metric_adds_a_column(tmp_path):
    logger = CSVLogger(tmp_path, version="mine", flush_logs_every_n_steps=1)
    logger.start(str(tmp_path))
    logger.log_metrics({"a": 1.0}, step=0)
    logger.log_metrics({"a": 2.0, "b": 5.0}, step=1)  # b is new: the file is rewritten with its column
    again = CSVLogger(tmp_path)
    again.resume(logger.run_id)
    again.start(str(tmp_path))
    again.log_metrics({"b": 6.0}, step=2)
    again.finalize("FINISHED")
    metrics = read_metrics(tmp_path / "lightning_logs" / "mine")
    assert metrics["step"].tolist() == [0, 1, 2] and metrics["b"].tolist()[1:] == [5.0, 6.0]
    assert metrics["a"].tolist()[:2] == [1.0, 2.0]


def test_bad_csv_logger_arguments_say_what_to_give():
    with pytest.raises(TypeError, match=r"version=...\) is an int .*got 1.5"):
        CSVLogger(version=1.5)
    with pytest.raises(ValueError, match="flush_logs_every_n_steps=...\\) is at least 1, got 0"):
        CSVLogger(flush_logs_every_n_steps=0)


def test_tensorboard_logger_is_lightnings_and_its_experiment_is_the_summary_writer(tmp_path):
    pytest.importorskip("tensorboard")
    from tracktrain.loggers import TensorBoardLogger

    module = UsesItsLogger()
    logger = TensorBoardLogger(tmp_path, name="tb", default_hp_metric=False)
    trainer = Trainer(**{**quiet(tmp_path, max_epochs=1, log_every_n_steps=4), "loggers": [logger]})
    trainer.fit(module, make_loader(), make_loader())
    assert logger.log_dir == str(tmp_path / "tb" / "version_0") == module.seen[1]
    assert "extra: 3" in (tmp_path / "tb" / "version_0" / "hparams.yaml").read_text()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(logger.log_dir, size_guidance={"images": 0})
    events.Reload()
    assert events.Tags()["images"] == ["sample"] and "train_loss" in events.Tags()["scalars"]


def test_lightnings_logger_names_import_from_tracktrain_loggers():
    pytest.importorskip("mlflow")
    from tracktrain.loggers import MLFlowLogger, MLflowLogger, WandbLogger
    from tracktrain_integrations.wandb import WandbLogger as Ours

    assert issubclass(MLFlowLogger, MLflowLogger) and WandbLogger is Ours


def test_mlflow_loggers_experiment_is_the_client_of_the_run(tmp_path):
    pytest.importorskip("mlflow")
    from tracktrain.loggers import MLFlowLogger

    logger = MLFlowLogger(experiment_name="surface", save_dir=tmp_path / "store", prefix="p", delivery="thread")
    Trainer(**{**quiet(tmp_path, max_epochs=1, log_every_n_steps=4), "loggers": [logger]}).fit(
        Classifier(), make_loader()
    )
    client = logger.experiment
    run = client.get_run(logger.run_id)  # Lightning's `logger.experiment.<client call>(logger.run_id, ...)`
    assert logger.version == logger.run_id and logger.name == logger.experiment_id == run.info.experiment_id
    assert "p-train_loss" in run.data.metrics and logger.save_dir == str(tmp_path / "store")
