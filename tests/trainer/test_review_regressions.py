"""Behaviour a review of the Trainer found wrong once; each test failed before its fix."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

import tracktrain
from tracktrain import Callback, Events, Trainer
from tracktrain.callbacks import EarlyStopping, ModelCheckpoint
from tracktrain.metrics import Metric

from ._tasks import GAN, Classifier, make_loader, quiet


def test_on_exception_runs_once_and_no_handler_swallows_the_error(tmp_path):
    seen = []

    class Watch(Callback):
        def on_exception(self, trainer, module, exception):
            seen.append(exception)

    class Broken(Classifier):
        def train_step(self, batch, batch_idx):
            raise RuntimeError("boom in train_step")

    trainer = Trainer(**quiet(tmp_path, max_epochs=1, callbacks=[Watch()]))
    trainer.train_engine.add_event_handler(Events.EXCEPTION_RAISED, lambda engine, e: None)  # would swallow it
    with pytest.raises(RuntimeError, match="boom in train_step"):
        trainer.fit(Broken(), make_loader())
    assert len(seen) == 1


def test_on_exception_sees_a_failure_before_the_engine_runs(tmp_path):
    seen = []

    class Watch(Callback):
        def on_exception(self, trainer, module, exception):
            seen.append(type(exception))

    missing = tmp_path / "missing.pt"
    with pytest.raises(Exception):
        Trainer(**quiet(tmp_path, callbacks=[Watch()])).fit(Classifier(), make_loader(), ckpt_path=missing)
    assert len(seen) == 1


class EpochScheduled(Classifier):
    def __init__(self):
        super().__init__(lr=1.0)
        self.lrs = []

    def on_train_epoch_start(self):
        self.lrs.append(self.trainer.optimizers[0].param_groups[0]["lr"])

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=1.0)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]


def test_a_checkpoint_at_epoch_end_holds_the_stepped_scheduler(tmp_path):
    full = EpochScheduled()
    Trainer(**quiet(tmp_path, max_epochs=3, limit_train_batches=2)).fit(full, make_loader())
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt")
    Trainer(**quiet(tmp_path, max_epochs=1, limit_train_batches=2, callbacks=[checkpoint])).fit(
        EpochScheduled(), make_loader()
    )
    resumed = EpochScheduled()
    Trainer(**quiet(tmp_path, max_epochs=3, limit_train_batches=2)).fit(
        resumed, make_loader(), ckpt_path=checkpoint.best_model_path
    )
    assert full.lrs == [1.0, 0.5, 0.25]
    assert resumed.lrs == full.lrs[1:]


def test_early_stopping_from_a_mid_epoch_validation_still_ends_the_epoch(tmp_path):
    epoch_ends = []

    class Scripted(Classifier):
        def eval_step(self, batch, batch_idx):
            self.log("score", 1.0)  # never improves

        def on_train_epoch_end(self):
            epoch_ends.append(self.trainer.global_step)

    stopper = EarlyStopping("score", patience=1)
    trainer = Trainer(**quiet(tmp_path, max_epochs=5, val_check_interval=2, limit_val_batches=1, callbacks=[stopper]))
    trainer.fit(Scripted(), make_loader(), make_loader())
    assert trainer.global_step == 4  # validations after batches 2 and 4: the second one stops
    assert epoch_ends == [4]  # the epoch cut short still ended, once
    assert trainer.train_engine.state.epoch == 1


def test_values_logged_in_batch_and_backward_hooks_are_per_step(tmp_path):
    class HookLogs(Classifier):
        def train_step(self, batch, batch_idx):
            loss = super().train_step(batch, batch_idx)
            self.log("both", loss, on_step=True, on_epoch=True)
            return loss

        def on_after_backward(self):
            self.log("grad_norm", self.net.weight.grad.norm())

        def on_train_batch_end(self, outputs, batch, batch_idx):
            self.log("batch_end", float(batch_idx))

        def on_train_epoch_start(self):
            self.log("epoch_start", 1.0)

    trainer = Trainer(**quiet(tmp_path, max_epochs=1, log_every_n_steps=1))
    trainer.fit(HookLogs(), make_loader())
    metrics = trainer.callback_metrics
    assert {"grad_norm", "batch_end", "both", "both_step", "both_epoch", "epoch_start"} <= set(metrics)
    assert float(metrics["batch_end"]) == 7.0  # the last step's value, not an epoch mean (3.5)
    assert "epoch_start" in trainer.logged_metrics and "grad_norm" in trainer.logged_metrics


class Stream(IterableDataset):
    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        return iter(self.batches)


def test_loaders_without_a_length_and_a_partial_accumulation_window(tmp_path):
    x, y = make_loader(n=56).dataset.tensors
    batches = [(x[i : i + 8], y[i : i + 8]) for i in range(0, 56, 8)]  # 7 batches
    loader = DataLoader(Stream(batches), batch_size=None)
    steps_at_epoch_end = []

    class Steps(Classifier):
        def on_train_epoch_end(self):
            steps_at_epoch_end.append(self.trainer.global_step)

    trainer = Trainer(**quiet(tmp_path, max_epochs=2, accumulate_grad_batches=3))
    trainer.fit(Steps(), loader)
    assert steps_at_epoch_end == [3, 6]  # windows of 3, 3 and a last one of 1, each epoch


def test_a_model_engine_from_initialize_keeps_its_precision(tmp_path):
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    engine, *_ = tracktrain.initialize(model, optimizer, nn.CrossEntropyLoss(), autocast_dtype=torch.bfloat16)
    dtypes = set()
    model.register_forward_hook(lambda module, inputs, output: dtypes.add(output.dtype))
    Trainer(**quiet(tmp_path, max_epochs=1)).fit(engine, make_loader())
    assert dtypes == {torch.bfloat16}


def test_gradient_clip_val_is_not_written_into_a_given_model_engine(tmp_path):
    model = nn.Linear(4, 2)
    engine, *_ = tracktrain.initialize(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss())
    with pytest.raises(ValueError, match=r"initialize\(\.\.\., clip_grad_norm=\.\.\.\)"):
        Trainer(**quiet(tmp_path, gradient_clip_val=1.0)).fit(engine, make_loader())
    assert engine.clip_grad_norm is None


def test_manual_optimization_fires_before_optimizer_step(tmp_path):
    optimizers = []

    class Watch(Callback):
        def on_before_optimizer_step(self, trainer, module, optimizer):
            optimizers.append(optimizer)

    trainer = Trainer(**quiet(tmp_path, max_epochs=1, limit_train_batches=2, callbacks=[Watch()]))
    trainer.fit(GAN(), make_loader())
    d_opt, g_opt = trainer.optimizers
    assert optimizers == [d_opt, g_opt, d_opt, g_opt]


class Histogram(Metric):
    """A metric whose value is a vector."""

    def reset(self):
        self.counts = torch.zeros(2)

    def update(self, output):
        self.counts += torch.bincount(output, minlength=2).float()

    def compute(self):
        return self.counts


def test_validate_with_a_vector_metric_on_the_eval_engine(tmp_path):
    class Predicts(Classifier):
        def eval_step(self, batch, batch_idx):
            super().eval_step(batch, batch_idx)
            return self(batch[0]).argmax(1)

    trainer = Trainer(**quiet(tmp_path))
    Histogram().attach(trainer.eval_engine, "histogram")
    (values,) = trainer.validate(Predicts(), make_loader())
    assert set(values) == {"val_loss"}
    assert trainer.eval_engine.state.metrics["histogram"].sum() == 64


def test_a_run_that_cannot_attach_leaves_nothing_attached(tmp_path):
    class Bad(Callback):
        def on_train_epoch_start(self, trainer, module):
            pass

        def event_handlers(self, trainer):
            return [("fit", Events.ITERATION_COMPLETED, "not callable")]

    trainer = Trainer(**quiet(tmp_path, max_epochs=1, callbacks=[Bad()]))
    with pytest.raises(TypeError):
        trainer.fit(Classifier(), make_loader())
    assert not any(trainer.train_engine._event_handlers.values())


def test_limit_error_names_the_real_argument(tmp_path):
    with pytest.raises(ValueError, match=r"Trainer\(limit_val_batches=0.5\) is a fraction"):
        Trainer(**quiet(tmp_path, limit_val_batches=0.5)).validate(Classifier(), (b for b in make_loader()))


def test_current_epoch_counts_finished_epochs_after_training(tmp_path):
    seen = {}

    class Epochs(Classifier):
        def on_train_epoch_end(self):
            seen.setdefault("epoch_end", []).append(self.current_epoch)

        def on_train_end(self):
            seen["train_end"] = self.current_epoch

        def on_fit_end(self):
            seen["fit_end"] = self.current_epoch

    Trainer(**quiet(tmp_path, max_epochs=2, limit_train_batches=1)).fit(Epochs(), make_loader())
    assert seen == {"epoch_end": [0, 1], "train_end": 2, "fit_end": 2}
