"""LearningRateMonitor: Lightning's names, values that follow the schedulers exactly, at steps or epochs."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

from tracktrain.callbacks.lr_monitor import LearningRateMonitor

from .conftest import TinyModule, batches


class ScheduledModule(TinyModule):
    """TinyModule whose configure_optimizers returns what `make_optimizers(parameters)` builds."""

    def __init__(self, make_optimizers) -> None:
        super().__init__()
        self.make_optimizers = make_optimizers

    def configure_optimizers(self) -> Any:
        return self.make_optimizers(self)


def trajectory(make_scheduler, steps: int, lr: float = 0.1) -> list[float]:
    """The learning rate a fresh optimizer has before each of `steps` scheduler steps: the oracle."""
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    scheduler = make_scheduler(optimizer)
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


def step_lr(optimizer):
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)


def inverse_lr(optimizer):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))


def test_epoch_interval_follows_step_lr_exactly(make_trainer):
    def optimizers(module):
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
        return {"optimizer": optimizer, "lr_scheduler": step_lr(optimizer)}

    monitor = LearningRateMonitor(logging_interval="epoch")
    trainer = make_trainer(max_epochs=5, callbacks=[monitor])
    trainer.fit(ScheduledModule(optimizers), batches(2))
    expected = trajectory(step_lr, 5)
    assert expected == [0.1, 0.1, 0.05, 0.05, 0.025]
    assert monitor.lrs == {"lr-SGD": expected}
    assert trainer.recorder.values_of("lr-SGD") == expected
    assert trainer.recorder.steps_of("lr-SGD") == [0, 2, 4, 6, 8]  # at the start of each epoch
    assert float(trainer.callback_metrics["lr-SGD"]) == expected[-1]


@pytest.mark.parametrize("log_every_n_steps, logged_steps", [(1, [0, 1, 2, 3, 4, 5]), (2, [1, 3, 5]), (4, [3])])
def test_step_interval_follows_a_per_step_scheduler(make_trainer, log_every_n_steps, logged_steps):
    def optimizers(module):
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": inverse_lr(optimizer), "interval": "step"}}

    monitor = LearningRateMonitor(logging_interval="step")
    trainer = make_trainer(max_epochs=2, log_every_n_steps=log_every_n_steps, callbacks=[monitor])
    trainer.fit(ScheduledModule(optimizers), batches(3))
    expected = trajectory(inverse_lr, 6)
    # each value is the rate the step uses, logged with the step (as the Trainer's step values: every n-th step)
    assert trainer.recorder.steps_of("lr-SGD") == logged_steps
    assert monitor.lrs["lr-SGD"] == [expected[step] for step in logged_steps]
    assert trainer.recorder.values_of("lr-SGD") == monitor.lrs["lr-SGD"]


def test_step_interval_logs_once_per_optimizer_step_under_accumulation(make_trainer):
    def optimizers(module):
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": inverse_lr(optimizer), "interval": "step"}}

    monitor = LearningRateMonitor(logging_interval="step")
    trainer = make_trainer(max_epochs=1, log_every_n_steps=1, accumulate_grad_batches=2, callbacks=[monitor])
    trainer.fit(ScheduledModule(optimizers), batches(6))
    assert trainer.recorder.steps_of("lr-SGD") == [0, 1, 2]
    assert monitor.lrs["lr-SGD"] == trajectory(inverse_lr, 3)


def test_a_resumed_run_keeps_the_logging_cadence(make_trainer, tmp_path):
    from tracktrain.callbacks.model_checkpoint import ModelCheckpoint

    def optimizers(module):
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": inverse_lr(optimizer), "interval": "step"}}

    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    first = make_trainer(max_epochs=1, log_every_n_steps=2, callbacks=[LearningRateMonitor("step"), checkpoint])
    first.fit(ScheduledModule(optimizers), batches(2))
    assert first.recorder.steps_of("lr-SGD") == [1]
    monitor = LearningRateMonitor("step")
    resumed = make_trainer(max_epochs=3, log_every_n_steps=2, callbacks=[monitor])
    resumed.fit(ScheduledModule(optimizers), batches(2), ckpt_path=checkpoint.last_model_path)
    assert resumed.recorder.steps_of("lr-SGD") == [3, 5]  # as an uninterrupted run: not at the first step of resuming
    assert monitor.lrs["lr-SGD"] == [trajectory(inverse_lr, 6)[step] for step in (3, 5)]


class TwoOptimizers(TinyModule):
    """Manual optimization with an SGD stepped per step and an Adam stepped per epoch (named "adam-lr")."""

    automatic_optimization = False

    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(2, 2)

    def train_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        sgd, adam = self.optimizers()
        loss = torch.nn.functional.cross_entropy(self.head(self.net(x)), y)
        self.backward(loss)
        sgd.step()
        adam.step()
        sgd.zero_grad()
        adam.zero_grad()
        self.lr_schedulers()[0].step()

    def on_train_epoch_end(self) -> None:
        self.lr_schedulers()[1].step()

    def configure_optimizers(self) -> Any:
        sgd = torch.optim.SGD(self.net.parameters(), lr=0.1, momentum=0.5)
        adam = torch.optim.Adam(self.head.parameters(), lr=0.01, betas=(0.8, 0.999))
        return [
            {"optimizer": sgd, "lr_scheduler": {"scheduler": inverse_lr(sgd), "interval": "step"}},
            {"optimizer": adam, "lr_scheduler": {"scheduler": step_lr(adam), "interval": "epoch", "name": "adam-lr"}},
        ]


def test_no_interval_logs_each_scheduler_at_its_own_interval_with_momentum(make_trainer):
    monitor = LearningRateMonitor(log_momentum=True)
    trainer = make_trainer(max_epochs=3, log_every_n_steps=1, callbacks=[monitor])
    trainer.fit(TwoOptimizers(), batches(2))
    # two optimizer steps per batch: the global step advances by 2
    assert trainer.recorder.steps_of("lr-SGD") == [0, 2, 4, 6, 8, 10]
    assert monitor.lrs["lr-SGD"] == trajectory(inverse_lr, 6)
    assert trainer.recorder.steps_of("adam-lr") == [0, 4, 8]
    assert monitor.lrs["adam-lr"] == trajectory(step_lr, 3, lr=0.01)
    assert set(trainer.recorder.values_of("lr-SGD-momentum")) == {0.5}
    assert set(trainer.recorder.values_of("adam-lr-momentum")) == {0.8}  # betas[0]


def test_two_optimizer_steps_per_batch_still_log_once_per_interval(make_trainer):
    monitor = LearningRateMonitor(logging_interval="step")
    trainer = make_trainer(max_epochs=3, log_every_n_steps=2, callbacks=[monitor])
    trainer.fit(TwoOptimizers(), batches(2))
    # each batch starts 2 steps later: every batch but the first starts a new interval of 2 steps
    assert trainer.recorder.steps_of("lr-SGD") == [2, 4, 6, 8, 10]
    assert monitor.lrs["lr-SGD"] == trajectory(inverse_lr, 6)[1:]


def test_momentum_of_an_optimizer_without_one_is_zero_with_a_warning(make_trainer):
    class AdagradModule(TinyModule):
        def configure_optimizers(self):
            return torch.optim.Adagrad(self.parameters(), lr=0.1)

    trainer = make_trainer(callbacks=[LearningRateMonitor(logging_interval="epoch", log_momentum=True)])
    with pytest.warns(RuntimeWarning, match=r"log_momentum=True.*\['Adagrad'\] have no momentum"):
        trainer.fit(AdagradModule(), batches(1))
    assert trainer.recorder.calls[0][1] == {"lr-Adagrad": 0.1, "lr-Adagrad-momentum": 0.0}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # validating the trained module checks (and warns about) nothing again
        trainer.validate(dataloaders=batches(1))


def groups(module: TinyModule, names: tuple[str | None, str | None]) -> list[dict]:
    made = []
    for params, name in zip(([module.net.weight], [module.net.bias]), names):
        made.append({"params": params} if name is None else {"params": params, "name": name})
    return made


@pytest.mark.parametrize(
    "names, expected",
    [
        ((None, None), ["lr-SGD/pg1", "lr-SGD/pg2"]),
        (("body", "head"), ["lr-SGD/body", "lr-SGD/head"]),
        ((None, "head"), ["lr-SGD/pg1", "lr-SGD/head"]),
    ],
)
def test_parameter_groups_are_named_like_lightning(make_trainer, names, expected):
    def optimizers(module):
        return torch.optim.SGD(groups(module, names), lr=0.1)

    monitor = LearningRateMonitor(logging_interval="epoch")
    make_trainer(callbacks=[monitor]).fit(ScheduledModule(optimizers), batches(1))
    assert list(monitor.lrs) == expected


def test_duplicate_group_names_are_refused_before_training(make_trainer):
    def optimizers(module):
        return torch.optim.SGD(groups(module, ("same", "same")), lr=0.1)

    module = ScheduledModule(optimizers)
    trainer = make_trainer(callbacks=[LearningRateMonitor()])
    with pytest.raises(ValueError, match=r"\['same'\] name several groups.*its own name"):
        trainer.fit(module, batches(1))
    assert trainer.global_step == 0


class FourOptimizers(TinyModule):
    """Manual optimization with four optimizers: an SGD of one group, an SGD of two unnamed groups, an Adam whose
    scheduler is named "custom" (each of the three scheduled), and an SGD of two named groups without a scheduler."""

    automatic_optimization = False

    def train_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.backward(loss)
        for optimizer in self.optimizers():
            optimizer.step()
            optimizer.zero_grad()

    def configure_optimizers(self) -> Any:
        single = [self.net.weight]
        sgd_a, sgd_b = torch.optim.SGD(single, lr=0.1), torch.optim.SGD(groups(self, (None, None)), lr=0.2)
        adam, sgd_c = torch.optim.Adam(single, lr=0.3), torch.optim.SGD(groups(self, ("body", "head")), lr=0.4)
        return [
            {"optimizer": sgd_a, "lr_scheduler": step_lr(sgd_a)},
            {"optimizer": sgd_b, "lr_scheduler": step_lr(sgd_b)},
            {"optimizer": adam, "lr_scheduler": {"scheduler": step_lr(adam), "name": "custom"}},
            {"optimizer": sgd_c},
        ]


def test_names_match_lightning_for_several_optimizers_and_schedulers(make_trainer):
    lightning = pytest.importorskip("pytorch_lightning.callbacks.lr_monitor")
    monitor = LearningRateMonitor(logging_interval="epoch")
    trainer = make_trainer(callbacks=[monitor])
    trainer.fit(FourOptimizers(), batches(1))

    ours = ["lr-SGD", "lr-SGD-1/pg1", "lr-SGD-1/pg2", "custom", "lr-SGD-2/body", "lr-SGD-2/head"]
    assert monitor.lrs == dict(zip(ours, ([0.1], [0.2], [0.2], [0.3], [0.4], [0.4])))  # in this order
    assert trainer.recorder.calls == [(0, dict(zip(ours, (0.1, 0.2, 0.2, 0.3, 0.4, 0.4))))]  # what the loggers got
    # the names Lightning's monitor gives the same optimizers and schedulers, read from the Trainer that ran
    reference = lightning.LearningRateMonitor()
    scheduler_names, seen, seen_types = reference._find_names_from_schedulers(trainer.lr_scheduler_configs)
    optimizer_names, _ = reference._find_names_from_optimizers(trainer.optimizers, seen, seen_types)
    assert ours == [name for names in scheduler_names + optimizer_names for name in names]


def test_a_scheduler_without_an_optimizer_is_refused_clearly(make_trainer):
    class Schedule:
        def step(self):
            pass

    def optimizers(module):
        return {"optimizer": torch.optim.SGD(module.parameters(), lr=0.1), "lr_scheduler": Schedule()}

    with pytest.raises(TypeError, match=r"scheduler\.optimizer, but Schedule has None there"):
        make_trainer(callbacks=[LearningRateMonitor()]).fit(ScheduledModule(optimizers), batches(1))


def test_bad_interval_is_refused():
    with pytest.raises(ValueError, match=r'"step", "epoch" or None, got \'steps\''):
        LearningRateMonitor(logging_interval="steps")
