"""Habits found in real Lightning programs (issue 46), each as Lightning means it: `fit(model=...)` and Lightning's other
keyword names and orders, `test(verbose=...)`, `predict(return_predictions=False)`, a step without `batch_idx`,
`Trainer(callbacks=one)`, a top-level "monitor" in `configure_optimizers`, val loaders given to a module without
`eval_step` (a warning, as Lightning's), `toggle_optimizer`, `save_hyperparameters(logger=False)`,
`example_input_array` in the model summary, `ModelCheckpoint(verbose=, train_time_interval=)`,
`EarlyStopping(strict=False, verbose=)`. Lightning 2.6 is the oracle where both can run the same code."""

from __future__ import annotations

import datetime
import logging
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tracktrain import Callback, LoopModule, Trainer
from tracktrain.callbacks import EarlyStopping, ModelCheckpoint, ModelSummary

from ._tasks import GAN, Classifier, CrashAtStep, make_loader, quiet


def test_fit_validate_test_predict_take_lightnings_keyword_names(tmp_path, capsys):
    trainer = Trainer(**quiet(tmp_path, max_epochs=1))
    module = Classifier()
    trainer.fit(model=module, train_dataloaders=make_loader(), val_dataloaders=make_loader(seed=1))
    (validated,) = trainer.validate(model=module, dataloaders=make_loader(seed=1), verbose=False)
    assert capsys.readouterr().out == ""  # verbose=False: nothing printed
    (tested,) = trainer.test(model=module, dataloaders=make_loader(seed=1))
    table = capsys.readouterr().out
    assert "Test metric" in table and "DataLoader 0" in table and "val_loss" in table  # Lightning's table
    assert tested == validated
    assert trainer.predict(model=module, dataloaders=[torch.ones(2, 4)], return_predictions=False) is None
    (prediction,) = trainer.predict(module, [torch.ones(2, 4)], None, True)  # Lightning's positional order
    assert prediction.shape == (2, 2)
    with pytest.raises(TypeError, match=r"test\(verbose=...\) is True or False, got 'yes'"):
        trainer.test(module, make_loader(), verbose="yes")


class WithoutBatchIdx(LoopModule):
    """Steps defined as `def training_step(self, batch)`, as some Lightning programs do."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Linear(4, 2)

    def train_step(self, batch):
        return F.cross_entropy(self.net(batch[0]), batch[1])

    def eval_step(self, batch):
        self.log("val_loss", F.cross_entropy(self.net(batch[0]), batch[1]))

    def predict_step(self, batch):
        return self.net(batch)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_steps_without_batch_idx_are_called_with_the_batch_alone(tmp_path):
    trainer = Trainer(**quiet(tmp_path, max_epochs=2))
    module = WithoutBatchIdx()
    trainer.fit(module, make_loader(), [make_loader(seed=1), make_loader(seed=2)])  # several: dataloader_idx too
    assert trainer.global_step == 16 and "val_loss/dataloader_idx_1" in trainer.callback_metrics
    reference = Classifier()  # the same model with batch_idx in its steps
    Trainer(**quiet(tmp_path / "ref", max_epochs=2)).fit(reference, make_loader())
    assert torch.allclose(module.net.weight, reference.net.weight)
    (prediction,) = trainer.predict(module, [torch.ones(2, 4)])
    assert prediction.shape == (2, 2)


def test_one_callback_not_in_a_list_is_taken(tmp_path):
    class Counts(Callback):
        epochs = 0

        def on_train_epoch_end(self, trainer, module):
            Counts.epochs += 1

    Trainer(**{**quiet(tmp_path, max_epochs=2), "callbacks": Counts()}).fit(Classifier(), make_loader())
    assert Counts.epochs == 2


def test_a_top_level_monitor_in_configure_optimizers_steps_the_plateau_scheduler(tmp_path):
    class Plateau(Classifier):
        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0, factor=0.5, threshold=1e9)
            return {"optimizer": optimizer, "lr_scheduler": scheduler, "monitor": "val_loss"}

    trainer = Trainer(**quiet(tmp_path, max_epochs=3))
    trainer.fit(module := Plateau(), make_loader(), make_loader(seed=1))
    assert trainer.lr_scheduler_configs[0].monitor == "val_loss"
    assert module.optimizers().param_groups[0]["lr"] < 0.1  # stepped with val_loss (threshold: never improves)


def test_val_loaders_for_a_module_without_eval_step_are_skipped_with_a_warning_as_lightning(tmp_path):
    class TrainOnly(Classifier):
        eval_step = LoopModule.eval_step

    trainer = Trainer(**quiet(tmp_path, max_epochs=1))
    with pytest.warns(UserWarning, match=r"got val_dataloaders, but TrainOnly defines no eval_step"):
        trainer.fit(TrainOnly(), make_loader(), make_loader(seed=1))
    assert trainer.global_step == 8 and "val_loss" not in trainer.callback_metrics


def test_toggle_optimizer_leaves_the_other_optimizers_parameters_without_gradients(tmp_path):
    seen = {}

    class Toggling(GAN):
        def train_step(self, batch, batch_idx):
            d_opt, g_opt = self.optimizers()
            self.toggle_optimizer(g_opt)
            seen["discriminator"] = [p.requires_grad for p in self.discriminator.parameters()]
            seen["generator"] = [p.requires_grad for p in self.generator.parameters()]
            fake = self.generator(torch.randn(batch[0].shape[0], 2))
            g_loss = F.softplus(-self.discriminator(fake)).mean()
            g_opt.zero_grad()
            self.manual_backward(g_loss)
            seen["d_grad"] = [p.grad for p in self.discriminator.parameters()]
            g_opt.step()
            self.untoggle_optimizer(g_opt)
            with self.toggled_optimizer(d_opt):
                seen["inside"] = [p.requires_grad for p in self.generator.parameters()]
            seen["after"] = [p.requires_grad for p in self.generator.parameters()]

    Trainer(**quiet(tmp_path, max_epochs=1)).fit(Toggling(), make_loader())
    assert seen["discriminator"] == [False, False] and seen["generator"] == [True, True]
    assert seen["d_grad"] == [None, None]  # no gradient reached the discriminator in the generator's step
    assert seen["inside"] == [False, False] and seen["after"] == [True, True]


def test_save_hyperparameters_logger_false_keeps_them_out_of_the_trackers(tmp_path):
    class Private(Classifier):
        def __init__(self, lr: float = 0.1, secret_path: str = "/data") -> None:
            super().__init__(lr)
            self.save_hyperparameters(logger=False)

    trainer = Trainer(**quiet(tmp_path, max_epochs=1))
    trainer.fit(module := Private(), make_loader())
    assert module.hparams == {"lr": 0.1, "secret_path": "/data"}  # kept, and in the checkpoints' settings
    assert trainer.settings["module"]["secret_path"] == "/data"
    logged = (tmp_path / "lightning_logs" / "version_0" / "hparams.yaml").read_text()
    assert "secret_path" not in logged and "max_epochs" in logged


def test_example_input_array_gives_the_summary_its_in_and_out_sizes_as_lightning(tmp_path):
    L = pytest.importorskip("lightning.pytorch")

    class Sized(Classifier):
        def __init__(self) -> None:
            super().__init__()
            self.example_input_array = torch.zeros(3, 4)

    summary = ModelSummary()
    Trainer(**{**quiet(tmp_path, max_epochs=1), "callbacks": [summary]}).fit(Sized(), make_loader())
    table = str(summary.last)
    assert "In sizes" in table and "[3, 4]" in table and "[3, 2]" in table

    class LightningSized(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(4, 2)
            self.example_input_array = torch.zeros(3, 4)

        def forward(self, x):
            return self.net(x)

    theirs = str(L.utilities.model_summary.ModelSummary(LightningSized()))
    assert "[3, 4]" in theirs and "[3, 2]" in theirs  # the same sizes in Lightning's own table


def test_model_checkpoint_saves_by_time_and_says_so_when_verbose(tmp_path, caplog):
    class Slow(Classifier):
        def train_step(self, batch, batch_idx):
            time.sleep(0.02)
            return super().train_step(batch, batch_idx)

    checkpoint = ModelCheckpoint(
        dirpath=tmp_path / "ckpt", train_time_interval=datetime.timedelta(seconds=0.05), save_top_k=-1, verbose=True
    )
    with caplog.at_level(logging.INFO, logger="tracktrain"):
        Trainer(**{**quiet(tmp_path, max_epochs=1), "callbacks": [checkpoint]}).fit(Slow(), make_loader())
    saved = sorted((tmp_path / "ckpt").glob("*.pt"))
    assert 2 <= len(saved) < 8  # every third step or so: by the clock, not every step
    assert "saving" in caplog.text and str(saved[0].name) in caplog.text
    with pytest.raises(ValueError, match="train_time_interval and every_n_train_steps"):
        ModelCheckpoint(train_time_interval=datetime.timedelta(minutes=5), every_n_train_steps=10)


def test_early_stopping_strict_false_skips_a_check_without_the_metric(tmp_path):
    stopping = EarlyStopping(monitor="never_logged", strict=False, verbose=True)
    trainer = Trainer(**{**quiet(tmp_path, max_epochs=2), "callbacks": [stopping]})
    with pytest.warns(UserWarning, match=r"strict=False\): 'never_logged' is not logged"):
        trainer.fit(Classifier(), make_loader(), make_loader(seed=1))
    assert trainer.current_epoch == 2
    with pytest.raises(Exception, match="never_logged"):  # strict (the default): the missing metric is an error
        Trainer(**{**quiet(tmp_path / "b", max_epochs=2), "callbacks": [EarlyStopping("never_logged")]}).fit(
            Classifier(), make_loader(), make_loader(seed=1)
        )


def test_on_step_in_validation_logs_each_batch_at_lightnings_step(tmp_path):
    L = pytest.importorskip("lightning.pytorch")

    def values_logged(module, trainer_class, **options):
        recorded = []

        def record(metrics, step=None):
            recorded.append((step, {key: round(float(value), 4) for key, value in metrics.items() if "val_x" in key}))

        trainer = trainer_class(max_epochs=1, enable_progress_bar=False, enable_checkpointing=False,
                                enable_model_summary=False, default_root_dir=tmp_path, **options)  # fmt: skip
        logger = trainer.loggers[0]
        logger.log_metrics = record
        trainer.validate(module, make_loader(n=24), verbose=False)
        return [entry for entry in recorded if entry[1]], dict(trainer.callback_metrics)

    class Ours(Classifier):
        def eval_step(self, batch, batch_idx):
            self.log("val_x", float(batch_idx), on_step=True, on_epoch=True)

    class Theirs(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(4, 2)

        def validation_step(self, batch, batch_idx):
            self.log("val_x", float(batch_idx), on_step=True, on_epoch=True)

    ours, our_metrics = values_logged(Ours(), Trainer)
    theirs, their_metrics = values_logged(Theirs(), L.Trainer, logger=L.loggers.CSVLogger(tmp_path))
    assert ours == theirs  # [(1, {"val_x_step": 0}), (2, ...), (3, ...), (epoch value)]
    assert {key for key in our_metrics if "val_x" in key} == {key for key in their_metrics if "val_x" in key}


@pytest.mark.parametrize("minimum", [{"min_epochs": 3}, {"min_steps": 20}])
def test_a_stop_asked_before_min_epochs_or_min_steps_waits_for_them_as_in_lightning(tmp_path, minimum):
    L = pytest.importorskip("lightning.pytorch")

    class StopAtOnce(Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            trainer.should_stop = True

    class LightningStopAtOnce(L.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            trainer.should_stop = True

    class LightningClassifier(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            return F.cross_entropy(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    ours = Trainer(**{**quiet(tmp_path, max_epochs=10, **minimum), "callbacks": [StopAtOnce()]})
    ours.fit(Classifier(), make_loader())
    theirs = L.Trainer(
        max_epochs=10, callbacks=[LightningStopAtOnce()], logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path, **minimum,
    )  # fmt: skip
    theirs.fit(LightningClassifier(), make_loader())
    assert ours.global_step == theirs.global_step  # 3 epochs of 8 steps; or the first step past 20
    assert ours.current_epoch == theirs.current_epoch


def test_detect_anomaly_names_the_backward_op_that_made_a_nan(tmp_path):
    class NaNGradient(Classifier):
        def train_step(self, batch, batch_idx):
            return torch.sqrt(self.net(batch[0]).sum() * 0 - 1)  # sqrt(-1): NaN, and so its gradient

    trainer = Trainer(**quiet(tmp_path, max_epochs=1, detect_anomaly=True, nonfinite="warn"))
    with pytest.raises(RuntimeError, match="SqrtBackward0"), pytest.warns(UserWarning, match="Anomaly Detection"):
        trainer.fit(NaNGradient(), make_loader())


def test_reload_dataloaders_every_n_epochs_asks_the_module_again_as_lightning(tmp_path):
    L = pytest.importorskip("lightning.pytorch")

    def reloading(base):
        class Reloading(base):
            def __init__(self) -> None:
                super().__init__()
                self.net = nn.Linear(4, 2)
                self.asked, self.sizes = [], []

            def train_dataloader(self):
                self.asked.append(self.trainer.current_epoch)
                return make_loader(n=32, batch_size=4 + 4 * len(self.asked))  # a curriculum: larger each time

            def on_train_batch_start(self, batch, batch_idx):
                if batch_idx == 0:
                    self.sizes.append(batch[0].shape[0])

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        return Reloading

    class Ours(reloading(LoopModule)):
        def train_step(self, batch, batch_idx):
            return F.cross_entropy(self.net(batch[0]), batch[1])

    class Theirs(reloading(L.LightningModule)):
        def training_step(self, batch, batch_idx):
            return F.cross_entropy(self.net(batch[0]), batch[1])

    ours = Ours()
    Trainer(**quiet(tmp_path, max_epochs=5, reload_dataloaders_every_n_epochs=2)).fit(ours)
    theirs = Theirs()
    L.Trainer(
        max_epochs=5, reload_dataloaders_every_n_epochs=2, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
    ).fit(theirs)  # fmt: skip
    assert ours.asked == theirs.asked == [0, 2, 4]
    assert ours.sizes == theirs.sizes == [8, 8, 12, 12, 16]


def test_gradient_accumulation_scheduler_trains_as_lightnings_and_resumes_exactly(tmp_path):
    L = pytest.importorskip("lightning.pytorch")
    from tracktrain.callbacks import GradientAccumulationScheduler

    scheduling = {0: 1, 1: 3, 2: 2}

    class LightningClassifier(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            return F.cross_entropy(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            self.total = self.trainer.estimated_stepping_batches
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Ours(Classifier):
        def configure_optimizers(self):
            self.total = self.trainer.estimated_stepping_batches
            return super().configure_optimizers()

    theirs = LightningClassifier()
    L.Trainer(
        max_epochs=3, callbacks=[L.callbacks.GradientAccumulationScheduler(scheduling)], logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
    ).fit(theirs, make_loader())  # fmt: skip
    ours = Ours()
    trainer = Trainer(**quiet(tmp_path, max_epochs=3, callbacks=[GradientAccumulationScheduler(scheduling)]))
    trainer.fit(ours, make_loader())
    # 8 batches an epoch: 8, 3, 4 steps. Lightning's estimate counts the epochs at the factor of the first (24)
    assert trainer.global_step == 8 + 3 + 4 == ours.total and theirs.total == 24
    assert torch.allclose(ours.net.weight, theirs.net.weight, atol=1e-6)

    def resumable(root, crash_at=None):
        callbacks = [
            GradientAccumulationScheduler(scheduling),
            ModelCheckpoint(dirpath=root / "ckpt", every_n_train_steps=2),
        ]
        callbacks += [CrashAtStep(crash_at)] if crash_at else []
        module = Classifier()
        Trainer(**quiet(root, max_epochs=3, seed=1, resume="auto", callbacks=callbacks)).fit(
            module, make_loader(shuffle=True)
        )
        return module

    whole = resumable(tmp_path / "whole")
    with pytest.raises(RuntimeError, match="killed"):
        resumable(tmp_path / "cut", crash_at=11)  # in the second epoch's windows of 3: resumed from step 10
    resumed = resumable(tmp_path / "cut")
    assert torch.equal(whole.net.weight, resumed.net.weight)
    with pytest.raises(ValueError, match="accumulate_grad_batches=2\\) and a GradientAccumulationScheduler"):
        Trainer(**quiet(tmp_path, accumulate_grad_batches=2, callbacks=[GradientAccumulationScheduler({0: 2})])).fit(
            Classifier(), make_loader()
        )


def test_a_cli_script_prints_the_logo_from_the_top_level_import(capsys):
    # a LightningCLI script's `from lightning.pytorch import cli_lightning_logo`, then `cli_lightning_logo()` first
    import tracktrain
    from tracktrain.utilities import LIGHTNING_LOGO

    tracktrain.cli_lightning_logo()
    printed = capsys.readouterr().out
    assert LIGHTNING_LOGO in printed and printed.startswith("\n") and "cli_lightning_logo" in tracktrain.__all__


def _warm_up_modules(L, shape: str):
    """The same module for Lightning and here, whose `optimizer_step` warms the learning rate up: `shape` "closure"
    calls `optimizer.step(closure=optimizer_closure)` then scales the rate (Lightning's docs); "super" calls
    `super().optimizer_step(*args, **kwargs)` then steps its own per-iteration scheduler (UvA's transformers
    tutorial); "zero_grad" also overrides `optimizer_zero_grad` (set_to_none=False)."""

    def define(base, step_name):
        class WarmUp(base):
            def __init__(self) -> None:
                super().__init__()
                torch.manual_seed(0)
                self.net = nn.Linear(4, 2)
                self.calls: list[tuple[int, int]] = []

            def configure_optimizers(self):
                optimizer = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
                self.warm_up = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 5))
                return optimizer

            def optimizer_step(self, *args, **kwargs):
                epoch, batch_idx, optimizer, closure = args
                self.calls.append((epoch, batch_idx))
                if shape == "closure":
                    optimizer.step(closure=closure)
                    for group in optimizer.param_groups:
                        group["lr"] = 0.1 * min(1.0, (self.trainer.global_step + 1) / 5)
                else:
                    super().optimizer_step(*args, **kwargs)
                    self.warm_up.step()

            def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
                if shape == "zero_grad":
                    optimizer.zero_grad(set_to_none=False)
                else:
                    super().optimizer_zero_grad(epoch, batch_idx, optimizer)

        def step(self, batch, batch_idx):
            return F.cross_entropy(self.net(batch[0]), batch[1])

        setattr(WarmUp, step_name, step)
        return WarmUp

    return define(L.LightningModule, "training_step"), define(LoopModule, "train_step")


@pytest.mark.parametrize("shape", ["closure", "super", "zero_grad"])
def test_an_optimizer_step_override_warms_the_rate_up_as_in_lightning(tmp_path, shape):
    L = pytest.importorskip("lightning.pytorch")
    Theirs, Ours = _warm_up_modules(L, shape)
    theirs, ours = Theirs(), Ours()
    L.Trainer(
        max_epochs=2, accumulate_grad_batches=3, gradient_clip_val=0.5, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
    ).fit(theirs, make_loader())  # fmt: skip
    trainer = Trainer(**quiet(tmp_path, max_epochs=2, accumulate_grad_batches=3, gradient_clip_val=0.5))
    trainer.fit(ours, make_loader())
    # 8 batches an epoch in windows of 3: the hook at each window's last batch (2, 5 and the short 7)
    assert ours.calls == theirs.calls == [(0, 2), (0, 5), (0, 7), (1, 2), (1, 5), (1, 7)]
    assert trainer.global_step == 6
    assert torch.allclose(ours.net.weight, theirs.net.weight, atol=1e-6)
    assert ours.trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(theirs.optimizers().param_groups[0]["lr"])


def test_an_optimizer_step_that_never_runs_its_closure_is_an_error_naming_the_fix(tmp_path):
    class Forgets(Classifier):
        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
            optimizer.step()

    with pytest.raises(RuntimeError, match=r"did not run its optimizer_closure.*optimizer.step\(closure="):
        Trainer(**quiet(tmp_path, max_steps=1)).fit(Forgets(), make_loader())


def test_a_train_step_returning_none_skips_its_batch_as_in_lightning(tmp_path):
    """Lightning's rule under automatic optimization: `return None` skips the batch (no backward, no step) — UvA's
    meta-learning notebook steps `self.optimizers()` itself and returns None."""
    L = pytest.importorskip("lightning.pytorch")

    def define(base, step_name):
        class SkipsOdd(base):
            def __init__(self) -> None:
                super().__init__()
                torch.manual_seed(0)
                self.net = nn.Linear(4, 2)

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        def step(self, batch, batch_idx):
            loss = F.cross_entropy(self.net(batch[0]), batch[1])
            if batch_idx % 2:
                return None
            return loss

        setattr(SkipsOdd, step_name, step)
        return SkipsOdd

    theirs = define(L.LightningModule, "training_step")()
    L.Trainer(
        max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=tmp_path,
    ).fit(theirs, make_loader())  # fmt: skip
    ours = define(LoopModule, "train_step")()
    trainer = Trainer(**quiet(tmp_path, max_epochs=2))
    trainer.fit(ours, make_loader())
    assert torch.allclose(ours.net.weight, theirs.net.weight, atol=1e-6)
    assert trainer.global_step == theirs.trainer.global_step, (trainer.global_step, theirs.trainer.global_step)
    unskipped = define(LoopModule, "train_step")()
    unskipped.train_step = lambda batch, batch_idx: F.cross_entropy(unskipped.net(batch[0]), batch[1])
    Trainer(**quiet(tmp_path / "all", max_epochs=2)).fit(unskipped, make_loader())
    assert not torch.allclose(ours.net.weight, unskipped.net.weight)  # the skipped batches changed nothing


def test_trainer_model_and_lightnings_core_and_strategies_paths(tmp_path):
    """`self.trainer.model.parameters()` in configure_optimizers (lightning-hydra-template), `trainer.lightning_module`,
    `from lightning.pytorch.core import LightningModule` and `isinstance(trainer.strategy, ParallelStrategy)`
    (Lightning's ImageNet example), each after the renames."""
    from tracktrain.core import DataModule
    from tracktrain.core import LoopModule as CoreModule
    from tracktrain.strategies import DDPStrategy, FSDPStrategy, ParallelStrategy, SingleDeviceStrategy

    class FromTrainerModel(Classifier):
        def configure_optimizers(self):
            self.__dict__["seen"] = (self.trainer.model, isinstance(self.trainer.strategy, ParallelStrategy))
            return torch.optim.SGD(self.trainer.model.parameters(), lr=0.1)

    trainer = Trainer(**quiet(tmp_path, max_epochs=1))
    first = FromTrainerModel()
    trainer.fit(first, make_loader())
    assert first.seen == (first, False) and trainer.model is first and trainer.lightning_module is first
    second = FromTrainerModel()
    trainer.fit(second, make_loader())  # max_epochs reached: nothing trained, as in Lightning
    assert trainer.model is second  # the module given, not the engine of the previous fit's
    reference = Classifier()
    Trainer(**quiet(tmp_path / "ref", max_epochs=1)).fit(reference, make_loader())
    assert torch.equal(first.net.weight, reference.net.weight)
    assert CoreModule is LoopModule and DataModule.__name__ == "DataModule"
    assert issubclass(DDPStrategy, ParallelStrategy) and issubclass(FSDPStrategy, ParallelStrategy)
    assert not issubclass(SingleDeviceStrategy, ParallelStrategy)
    assert DDPStrategy().num_processes == 1  # one process here (torchrun's LOCAL_WORLD_SIZE where launched)


def test_a_second_fit_after_the_limit_was_reached_trains_nothing_as_in_lightning(tmp_path, capsys):
    # the MNIST hello world fits a second module on the same Trainer: Lightning's Trainer counts its epochs across
    # fits, so with max_epochs reached the second module is not trained (and becomes the one test() evaluates)
    L = pytest.importorskip("lightning.pytorch")

    class LightningClassifier(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            return F.cross_entropy(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    theirs = L.Trainer(
        max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=tmp_path,
    )  # fmt: skip
    theirs.fit(LightningClassifier(), make_loader())
    their_second = LightningClassifier()
    theirs.fit(their_second, make_loader())
    trainer = Trainer(**quiet(tmp_path, max_epochs=1))
    trainer.fit(Classifier(), make_loader())
    second = Classifier()
    capsys.readouterr()
    trainer.fit(second, make_loader())
    assert "Trainer.fit stopped: this Trainer's previous fit reached its limit (max_epochs=1" in capsys.readouterr().err
    assert trainer.global_step == theirs.global_step == 8
    assert torch.equal(second.net.weight, Classifier().net.weight)  # untrained, as Lightning's second module
    assert torch.equal(their_second.net.weight, LightningClassifier().net.weight)
    assert trainer.module is second
    (tested,) = trainer.test(dataloaders=make_loader(seed=1), verbose=False)
    assert "val_loss" in tested


def test_a_tuple_hyperparameter_comes_back_a_tuple_from_the_checkpoint(tmp_path):
    # UvA's energy models: `(batch_size,) + self.hparams.img_shape` in the module rebuilt by load_from_checkpoint
    class Shaped(Classifier):
        def __init__(self, img_shape=(1, 4)) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.flat = (2,) + self.hparams.img_shape

    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt")
    Trainer(**{**quiet(tmp_path, max_epochs=1), "enable_checkpointing": True, "callbacks": [checkpoint]}).fit(
        Shaped(img_shape=(1, 2, 2)), make_loader()
    )
    loaded = Shaped.load_from_checkpoint(checkpoint.best_model_path)
    assert loaded.hparams.img_shape == (1, 2, 2) and loaded.flat == (2, 1, 2, 2)
    # and a fit resumed from it sees no change in the module's settings (the tuple as saved, and as lists before)
    Trainer(**{**quiet(tmp_path, max_epochs=2), "enable_checkpointing": True, "callbacks": [checkpoint]}).fit(
        Shaped(img_shape=(1, 2, 2)), make_loader(), ckpt_path=checkpoint.best_model_path
    )
    from tracktrain.checkpoint.run_settings import changed_settings

    assert changed_settings({"module": {"img_shape": [1, 2, 2]}}, {"module": {"img_shape": (1, 2, 2)}}) == {}
