"""Bad input to the Trainer and from the module's hooks: clear errors naming the value and the fix."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from torch import nn

from tracktrain import LoopModule, Trainer
from tracktrain.trainer.optimizers import parse_optimizers

from ._tasks import GAN, Classifier, make_loader, quiet


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"max_epochs": 0}, ValueError, r"max_epochs=\.\.\.\) must be a positive integer or None, got 0"),
        ({"max_steps": -1}, ValueError, r"max_steps.*got -1"),
        ({"accumulate_grad_batches": 0}, ValueError, "accumulate_grad_batches"),
        ({"gradient_clip_val": -1.0}, ValueError, "gradient_clip_val.*>= 0"),
        (
            {"gradient_clip_val": float("nan")},
            ValueError,
            r"gradient_clip_val=\.\.\.\) must be a finite number >= 0 or None, got nan",
        ),
        ({"gradient_clip_val": float("inf")}, ValueError, r"gradient_clip_val.*got inf"),
        ({"preemption_timeout": float("nan")}, ValueError, r"preemption_timeout.*got nan"),
        ({"gradient_clip_algorithm": "l2"}, ValueError, "gradient_clip_algorithm.*'l2'"),
        ({"val_check_interval": 0}, ValueError, "val_check_interval"),
        ({"limit_train_batches": 1.5}, ValueError, r"in \[0, 1\], got 1.5"),
        ({"limit_val_batches": -2}, ValueError, ">= 0 batches, got -2"),
        ({"limit_val_batches": "all"}, TypeError, "limit_val_batches"),
        ({"log_every_n_steps": 0}, ValueError, "log_every_n_steps"),
        ({"callbacks": [object()]}, TypeError, "takes tracktrain.callbacks.Callback instances"),
        ({"seed": "42"}, TypeError, r"seed=\.\.\.\) must be an int"),
        ({"precision": "8-bit"}, ValueError, r"precision=.*'8-bit'"),
        ({"strategy": "deepspeed"}, ValueError, r"strategy=.*'deepspeed'"),
        ({"accelerator": "tpu"}, ValueError, r"accelerator=.*'tpu'"),
    ],
)
def test_invalid_trainer_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        Trainer(**kwargs)


class Returns(Classifier):
    def __init__(self, returned):
        super().__init__()
        self.returned = returned

    def train_step(self, batch, batch_idx):
        super().train_step(batch, batch_idx)
        return self.returned(self, batch)


@pytest.mark.parametrize(
    ("returned", "match"),
    [
        (lambda m, b: {"logits": m(b[0])}, r"a dict without 'loss' \(keys \['logits'\]\)"),
        (lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1], reduction="none"), r"loss of shape \(8,\)"),
        (lambda m, b: torch.tensor(1.0), "does not require grad"),
    ],
)
def test_train_step_returning_junk(tmp_path, returned, match):
    with pytest.raises(ValueError, match=match):
        Trainer(**quiet(tmp_path, max_epochs=1)).fit(Returns(returned), make_loader())


def test_train_step_returning_a_dict_with_the_loss_works(tmp_path):
    module = Returns(lambda m, b: {"loss": nn.functional.cross_entropy(m(b[0]), b[1]), "extra": 1})
    trainer = Trainer(**quiet(tmp_path, max_epochs=1))
    trainer.fit(module, make_loader())
    assert trainer.global_step == 8


def _optimizer():
    return torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1)


@pytest.mark.parametrize(
    ("returned", "error", "match"),
    [
        (None, TypeError, "configure_optimizers must return an optimizer.*got NoneType None"),
        ("adam", TypeError, "got str 'adam'"),
        ([], TypeError, "got list"),
        ({"optimizer": "sgd"}, TypeError, "the 'optimizer' entry is str"),
        ({"optimizer": _optimizer(), "scheduler": 1}, ValueError, r"Unknown key\(s\) \['scheduler'\]"),
        (
            lambda o: {
                "optimizer": o,
                "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(o, 1), "interval": "batch"},
            },
            ValueError,
            r"\"interval\" must be",
        ),
        (
            lambda o: {
                "optimizer": o,
                "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(o, 1), "frequency": 0},
            },
            ValueError,
            r"\"frequency\" must be",
        ),
        (
            lambda o: {"optimizer": o, "lr_scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(o)},
            ValueError,
            "ReduceLROnPlateau needs a metric",
        ),
        (lambda o: ([o], [42]), TypeError, "has no step"),
    ],
)
def test_configure_optimizers_returning_junk(returned, error, match):
    if callable(returned):
        returned = returned(_optimizer())
    with pytest.raises(error, match=match):
        parse_optimizers(returned)


@pytest.mark.parametrize(
    "form",
    [
        lambda o, s: o,
        lambda o, s: [o],
        lambda o, s: ([o], [s]),
        lambda o, s: {"optimizer": o, "lr_scheduler": s},
        lambda o, s: [{"optimizer": o, "lr_scheduler": {"scheduler": s, "interval": "step"}}],
    ],
)
def test_configure_optimizers_forms(form):
    optimizer = _optimizer()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    optimizers, schedulers = parse_optimizers(form(optimizer, scheduler))
    assert optimizers == [optimizer]
    assert [config.scheduler for config in schedulers] in ([], [scheduler])


def test_two_optimizers_need_manual_optimization(tmp_path):
    class Two(Classifier):
        def configure_optimizers(self):
            return [torch.optim.SGD(self.parameters(), lr=0.1), torch.optim.Adam(self.parameters())]

    with pytest.raises(ValueError, match="returned 2 optimizers.*automatic_optimization = False"):
        Trainer(**quiet(tmp_path)).fit(Two(), make_loader())


def test_validating_without_eval_step(tmp_path):
    class NoEval(LoopModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 2)

        def train_step(self, batch, batch_idx):
            return nn.functional.cross_entropy(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = Trainer(**quiet(tmp_path))
    with pytest.warns(UserWarning, match="defines no eval_step"):  # fit: Lightning's warning, no validation
        trainer.fit(NoEval(), make_loader(), make_loader())
    with pytest.raises(NotImplementedError, match="must define eval_step"):  # validate: nothing to run
        trainer.validate(NoEval(), make_loader())


def test_fit_arguments(tmp_path):
    trainer = Trainer(**quiet(tmp_path))
    with pytest.raises(ValueError, match="train_dataloaders is required"):
        trainer.fit(Classifier())
    with pytest.raises(TypeError, match="must be a DataLoader or another iterable.*int"):
        trainer.fit(Classifier(), 5)
    with pytest.raises(TypeError, match="needs a LoopModule, an nn.Module.*got str"):
        trainer.fit("model", make_loader())
    with pytest.raises(TypeError, match="needs an optimizer"):
        trainer.fit(nn.Linear(4, 2), make_loader(), criterion=nn.CrossEntropyLoss())
    with pytest.raises(TypeError, match="needs a loss function"):
        model = nn.Linear(4, 2)
        trainer.fit(model, make_loader(), optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="for plain models"):
        trainer.fit(Classifier(), make_loader(), optimizer=_optimizer())
    with pytest.raises(ValueError, match=r"validate\(\) needs a module"):
        Trainer(**quiet(tmp_path)).validate(dataloaders=make_loader())


def test_gradient_clip_val_with_manual_optimization(tmp_path):
    with pytest.raises(ValueError, match="call self.clip_gradients"):
        Trainer(**quiet(tmp_path, gradient_clip_val=1.0)).fit(GAN(), make_loader())


def test_xla_without_torch_xla_says_how_to_install_it(tmp_path):
    if importlib.util.find_spec("torch_xla") is not None:
        pytest.skip("torch_xla is installed here")
    with pytest.raises(ModuleNotFoundError, match=r"torch==2.9.0 torch_xla==2.9.0.*PJRT_DEVICE=CPU"):
        Trainer(**quiet(tmp_path, strategy="xla")).fit(Classifier(), make_loader())


def test_a_logger_that_cannot_start_fails_the_fit_with_its_own_error(tmp_path):
    from tracktrain.loggers.csv_logger import CSVLogger

    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    trainer = Trainer(**quiet(tmp_path, max_epochs=1, loggers=[CSVLogger(save_dir=blocked / "logs")]))
    with pytest.raises(OSError) as failed:  # the cause, not "CSVLogger is not started"
        trainer.fit(Classifier(), make_loader())
    assert "a-file" in str(failed.value) and "not started" not in str(failed.value)


def test_an_on_exception_hook_that_fails_is_a_warning_and_the_run_s_error_is_raised(tmp_path):
    from tracktrain import Callback

    class Breaks(Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            raise RuntimeError("the run's own error")

    class FailsToo(Callback):
        def on_exception(self, trainer, module, exception):
            raise ValueError("a hook's failure")

    trainer = Trainer(**quiet(tmp_path, max_epochs=1, callbacks=[Breaks(), FailsToo()]))
    with pytest.warns(
        UserWarning,
        match=r"on_exception hook .* failed while the run was stopping on RuntimeError: "
        r"ValueError: a hook's failure",
    ):
        with pytest.raises(RuntimeError, match="the run's own error"):
            trainer.fit(Classifier(), make_loader())


def test_lightnings_logger_spelling_means_what_it_means_there(tmp_path):
    from tracktrain.loggers.csv_logger import CSVLogger

    assert Trainer(logger=False, default_root_dir=tmp_path).loggers == []
    single = CSVLogger()
    assert Trainer(logger=single, default_root_dir=tmp_path).loggers == [single]
    assert Trainer(logger=[single], default_root_dir=tmp_path).loggers == [single]
    with pytest.raises(ValueError, match=r"both logger=False and loggers=\[\]; pass one of them"):
        Trainer(logger=False, loggers=[], default_root_dir=tmp_path)
