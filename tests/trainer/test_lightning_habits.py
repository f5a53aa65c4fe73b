"""Everyday Lightning code, with only the renames our API makes (`LoopModule`, `train_step`, `eval_step`), runs on
the real Trainer with Lightning's meaning (issue 35) — and nothing a user writes is silently ignored."""

from __future__ import annotations

import os

import pytest

from tracktrain import Callback
from tracktrain.callbacks import ModelCheckpoint

from ._tasks import Classifier, make_loader


def quiet_trainer(root, **options):
    from tracktrain import Trainer

    options = {"enable_progress_bar": False, "enable_checkpointing": False, "loggers": False, **options}
    return Trainer(default_root_dir=root, **options)


# ------------------------------------------------------------------------------------------- trainer.should_stop
class StopAtStep(Callback):
    def __init__(self, step: int) -> None:
        self.step = step
        self.seen: list[bool] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            self.seen.append(trainer.should_stop)
            trainer.should_stop = True
            self.seen.append(trainer.should_stop)


def test_should_stop_set_by_a_callback_stops_the_fit_after_that_step(tmp_path):
    stopper = StopAtStep(3)
    trainer = quiet_trainer(tmp_path, max_epochs=5, callbacks=[stopper])
    trainer.fit(Classifier(), make_loader())  # 8 steps per epoch: 40 without the stop
    assert trainer.global_step == 3
    assert stopper.seen == [False, True]  # reading it gives the current request


class StopsItself(Classifier):
    def train_step(self, batch, batch_idx):
        if self.global_step == 2:
            self.trainer.should_stop = True
        return super().train_step(batch, batch_idx)


def test_should_stop_set_by_the_module_stops_the_fit(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=5)
    trainer.fit(StopsItself(), make_loader())
    assert trainer.global_step == 3  # the step that asked is finished


# under DDP: tests/trainer/test_ddp.py::test_a_stop_asked_on_one_rank_stops_every_rank_at_the_same_step sets it on
# one rank and both stop at the same step


# ------------------------------------------------------------------------------------------- configure_callbacks
class Recorder(Callback):
    def __init__(self, name: str) -> None:
        self.name = name
        self.epochs = 0

    def on_train_epoch_end(self, trainer, module):
        self.epochs += 1


class WithCallbacks(Classifier):
    def __init__(self, checkpoint_dir) -> None:
        super().__init__()
        self.checkpoint_dir = checkpoint_dir

    def configure_callbacks(self):
        return [ModelCheckpoint(dirpath=self.checkpoint_dir), Recorder("module's")]


def test_configure_callbacks_adds_the_modules_callbacks_replacing_those_of_the_same_type(tmp_path):
    given, kept = Recorder("trainer's"), StopAtStep(100)
    trainer = quiet_trainer(tmp_path, max_epochs=2, callbacks=[given, kept], enable_checkpointing=True)
    trainer.fit(WithCallbacks(tmp_path / "module_checkpoints"), make_loader())
    recorders = [callback for callback in trainer.callbacks if isinstance(callback, Recorder)]
    assert [recorder.name for recorder in recorders] == ["module's"]  # replaced, and it ran
    assert recorders[0].epochs == 2 and given.epochs == 0 and kept in trainer.callbacks
    checkpoints = [callback for callback in trainer.callbacks if isinstance(callback, ModelCheckpoint)]
    assert len(checkpoints) == 1 and trainer.callbacks[-1] is checkpoints[0]  # the Trainer's default replaced; last
    assert os.listdir(tmp_path / "module_checkpoints")  # the module's checkpoint callback saved
    assert not (tmp_path / "checkpoints").exists()


def test_configure_callbacks_returning_something_else_is_an_error(tmp_path):
    class Wrong(Classifier):
        def configure_callbacks(self):
            return [print]

    with pytest.raises(TypeError, match=r"configure_callbacks\(\) returned <built-in function print>.*Callback"):
        quiet_trainer(tmp_path, max_epochs=1).fit(Wrong(), make_loader())


# ------------------------------------------------------------------------------- nothing set on the Trainer is lost
@pytest.mark.parametrize(
    ("name", "names"),
    [
        ("max_epochz", "Did you mean max_epochs"),  # a typo
        ("check_val_every_n_epoch", r"Trainer\(val_every_n_epochs=\.\.\.\)"),  # Lightning's name for ours
        ("enable_progress_bar", r"Trainer\(enable_progress_bar=\.\.\.\)"),  # read when the Trainer is built only
        ("global_step", "read-only"),
    ],
)
def test_setting_an_attribute_the_trainer_does_not_read_is_an_error_naming_what_to_use(tmp_path, name, names):
    trainer = quiet_trainer(tmp_path)
    with pytest.raises(AttributeError, match=names):
        setattr(trainer, name, 3)
    assert name not in vars(trainer)


def test_the_trainers_own_settings_and_a_subclass_declared_attribute_can_be_set(tmp_path):
    from tracktrain import Trainer

    class MyTrainer(Trainer):
        own_attributes = frozenset({"notes"})

    trainer = MyTrainer(enable_progress_bar=False, enable_checkpointing=False, loggers=False, default_root_dir=tmp_path)
    trainer.max_epochs, trainer.notes = 1, "kept"
    trainer.fit(Classifier(), make_loader())  # a fit's own assignments (Session, RunCheckpoints) are all declared
    assert (trainer.global_step, trainer.notes) == (8, "kept")
    with pytest.raises(AttributeError, match="max_epochz"):
        trainer.max_epochz = 3
