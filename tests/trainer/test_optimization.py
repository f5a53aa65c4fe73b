"""The Trainer's optimization: accumulation, clipping, schedulers, max_steps, manual optimization."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tracktrain import Trainer

from ._tasks import GAN, Classifier, make_loader, quiet


class MeanLoss(Classifier):
    """cross_entropy with reduction mean: k batches of b accumulated = one batch of k*b."""


def _params(module: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def test_accumulation_equals_the_large_batch(tmp_path):
    small, large = MeanLoss(), MeanLoss()
    Trainer(**quiet(tmp_path, max_epochs=2, accumulate_grad_batches=4)).fit(small, make_loader(batch_size=4))
    Trainer(**quiet(tmp_path, max_epochs=2)).fit(large, make_loader(batch_size=16))
    for a, b in zip(_params(small), _params(large)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_accumulation_counts_optimizer_steps_and_steps_on_a_partial_last_window(tmp_path):
    trainer = Trainer(**quiet(tmp_path, max_epochs=2, accumulate_grad_batches=3))
    trainer.fit(Classifier(), make_loader(n=64, batch_size=8))  # 8 batches: windows of 3, 3, 2
    assert trainer.global_step == 6


def _raw_steps(module, loader, epochs, clip=None):
    optimizer = torch.optim.SGD(module.parameters(), lr=module.lr)
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(module(x), y).backward()
            if clip == "norm":
                torch.nn.utils.clip_grad_norm_(module.parameters(), 0.05)
            elif clip == "value":
                torch.nn.utils.clip_grad_value_(module.parameters(), 0.01)
            optimizer.step()


@pytest.mark.parametrize("algorithm", ["norm", "value"])
def test_gradient_clipping_matches_a_hand_written_loop(tmp_path, algorithm):
    value = 0.05 if algorithm == "norm" else 0.01
    trained, reference = Classifier(lr=1.0), Classifier(lr=1.0)
    Trainer(**quiet(tmp_path, max_epochs=2, gradient_clip_val=value, gradient_clip_algorithm=algorithm)).fit(
        trained, make_loader()
    )
    _raw_steps(reference, make_loader(), 2, clip=algorithm)
    unclipped = Classifier(lr=1.0)
    _raw_steps(unclipped, make_loader(), 2)
    for a, b, _c in zip(_params(trained), _params(reference), _params(unclipped)):
        torch.testing.assert_close(a, b)
    assert not all(torch.allclose(a, c) for a, c in zip(_params(trained), _params(unclipped)))


class Scheduled(Classifier):
    def __init__(self, interval, frequency):
        super().__init__(lr=1.0)
        self.interval, self.frequency = interval, frequency
        self.lrs: list[float] = []

    def train_step(self, batch, batch_idx):
        self.lrs.append(self.trainer.optimizers[0].param_groups[0]["lr"])
        return super().train_step(batch, batch_idx)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=1.0)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return [optimizer], [{"scheduler": scheduler, "interval": self.interval, "frequency": self.frequency}]


@pytest.mark.parametrize(
    ("interval", "frequency", "expected"),
    [
        ("step", 1, [1, 0.5, 0.25, 0.125, 0.0625, 0.03125]),
        ("step", 2, [1, 1, 0.5, 0.5, 0.25, 0.25]),
        ("epoch", 1, [1, 1, 1, 0.5, 0.5, 0.5]),
        ("epoch", 2, [1, 1, 1, 1, 1, 1]),
    ],
)
def test_scheduler_interval_and_frequency(tmp_path, interval, frequency, expected):
    module = Scheduled(interval, frequency)
    Trainer(**quiet(tmp_path, max_epochs=2, limit_train_batches=3)).fit(module, make_loader())
    assert module.lrs == expected


def test_reduce_on_plateau_steps_on_the_monitored_validation_metric(tmp_path):
    class Plateau(Classifier):
        def eval_step(self, batch, batch_idx):
            self.log("val_metric", torch.tensor(1.0))  # never improves

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=1.0)
            scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0, factor=0.1)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "val_metric"}}

    trainer = Trainer(**quiet(tmp_path, max_epochs=3, limit_train_batches=1, limit_val_batches=1))
    trainer.fit(Plateau(), make_loader(), make_loader())
    # epoch 1 sets the best; epochs 2 and 3 do not improve, with patience 0 each cuts the lr tenfold
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.01)


def test_monitored_metric_that_was_never_logged_names_the_ones_that_were(tmp_path):
    class Plateau(Classifier):
        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=1.0)
            scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "val_acc"}}

    trainer = Trainer(**quiet(tmp_path, max_epochs=1, limit_train_batches=1, limit_val_batches=1))
    with pytest.raises(KeyError, match=r"'val_acc'.*never logged.*\['train_loss', 'val_loss'\]"):
        trainer.fit(Plateau(), make_loader(), make_loader())


def test_max_steps_stops_mid_epoch(tmp_path):
    batches = []

    class Counting(Classifier):
        def train_step(self, batch, batch_idx):
            batches.append(batch_idx)
            return super().train_step(batch, batch_idx)

    trainer = Trainer(**quiet(tmp_path, max_steps=11))
    trainer.fit(Counting(), make_loader())  # 8 batches per epoch
    assert trainer.global_step == 11
    assert batches == list(range(8)) + [0, 1, 2]


def test_max_steps_with_accumulation_counts_optimizer_steps(tmp_path):
    trainer = Trainer(**quiet(tmp_path, max_steps=5, accumulate_grad_batches=2))
    trainer.fit(Classifier(), make_loader())
    assert trainer.global_step == 5
    assert trainer.train_engine.state.iteration == 10


def test_manual_optimization_with_two_optimizers(tmp_path):
    module = GAN()
    before = copy.deepcopy(module)
    trainer = Trainer(**quiet(tmp_path, max_epochs=1, limit_train_batches=3, log_every_n_steps=1))
    trainer.fit(module, make_loader())
    assert trainer.global_step == 6  # each optimizer step counts, as in Lightning
    for name in ("generator", "discriminator"):
        assert not torch.equal(getattr(module, name).weight, getattr(before, name).weight)
    assert {"d_loss", "g_loss"} <= set(trainer.logged_metrics)


def test_manual_optimization_with_max_steps(tmp_path):
    trainer = Trainer(**quiet(tmp_path, max_steps=4))
    trainer.fit(GAN(), make_loader())
    assert trainer.global_step == 4 and trainer.train_engine.state.iteration == 2


def test_plain_model_with_optimizer_and_criterion(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    trainer = Trainer(**quiet(tmp_path, max_epochs=15))
    trainer.fit(
        model,
        make_loader(),
        make_loader(seed=1),
        optimizer=torch.optim.SGD(model.parameters(), lr=0.2),
        criterion=nn.CrossEntropyLoss(),
    )
    assert trainer.callback_metrics["val_loss"] < 0.3
    (predictions,) = trainer.predict(dataloaders=[make_loader(seed=1).dataset.tensors[0]])
    assert predictions.shape == (64, 2)


def test_bf16_mixed_trains_under_autocast(tmp_path):
    dtypes = []

    class Probe(Classifier):
        def train_step(self, batch, batch_idx):
            dtypes.append(self(batch[0]).dtype)
            return super().train_step(batch, batch_idx)

    module = Probe()
    Trainer(**quiet(tmp_path, max_epochs=1, precision="bf16-mixed")).fit(module, make_loader())
    assert set(dtypes) == {torch.bfloat16}
    assert module.net.weight.dtype == torch.float32


def test_a_second_fit_is_a_new_run(tmp_path):
    trainer = Trainer(**quiet(tmp_path, max_epochs=2))
    trainer.fit(Classifier(), make_loader())
    assert trainer.global_step == 16
    trainer.fit(Classifier(), make_loader())
    assert trainer.global_step == 16 and trainer.train_engine.state.epoch == 2


def test_a_second_fit_with_max_steps_takes_max_steps(tmp_path):
    trainer = Trainer(**quiet(tmp_path, max_steps=5))
    trainer.fit(Classifier(), make_loader())
    trainer.fit(Classifier(), make_loader())
    assert trainer.global_step == 5 and trainer.train_engine.state.iteration == 5


def test_a_fit_after_a_crashed_fit_starts_over(tmp_path):
    class CrashOnce(Classifier):
        crashed = False

        def train_step(self, batch, batch_idx):
            if batch_idx == 3 and not CrashOnce.crashed:
                CrashOnce.crashed = True
                raise RuntimeError("boom")
            return super().train_step(batch, batch_idx)

    trainer = Trainer(**quiet(tmp_path, max_epochs=1))
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(CrashOnce(), make_loader())
    trainer.fit(CrashOnce(), make_loader())
    assert trainer.global_step == 8 and trainer.train_engine.state.iteration == 8


def test_trainer_seed_makes_runs_identical(tmp_path):
    def run():
        module = Classifier()
        torch.nn.init.normal_(module.net.weight)  # drawn from the seeded generator
        return module

    weights = []
    for _ in range(2):
        trainer = Trainer(**quiet(tmp_path, max_epochs=1, seed=7))

        class Init(Classifier):
            def on_fit_start(self):
                torch.nn.init.normal_(self.net.weight)

        module = Init()
        trainer.fit(module, make_loader(shuffle=True))
        weights.append(module.net.weight.detach().clone())
    assert torch.equal(weights[0], weights[1])
