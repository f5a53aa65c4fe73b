"""Everyday Lightning code, with only the renames our API makes (`LoopModule`, `train_step`, `eval_step`), runs on
the real Trainer with Lightning's meaning (issue 35) — and nothing a user writes is silently ignored."""

from __future__ import annotations

from tracktrain import Callback

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
