"""TensorBoard: the values the Trainer publishes land in real event files, read back with TensorBoard's reader."""

from __future__ import annotations

import pytest

from tracktrain import Trainer

from ..trainer._tasks import Classifier, make_loader, quiet

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
from tracktrain_integrations.tensorboard import TensorboardHook  # noqa: E402


def _scalars(log_dir):
    accumulator = event_accumulator.EventAccumulator(str(log_dir))
    accumulator.Reload()
    return {
        tag: [(event.step, event.value) for event in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]
    }


def test_published_values_are_written_at_their_global_step(tmp_path):
    hook = TensorboardHook(log_dir=tmp_path / "tb", ranks=[0])
    trainer = Trainer(**quiet(tmp_path, max_epochs=2, log_every_n_steps=4, callbacks=[hook], loggers=False))
    trainer.fit(Classifier(), make_loader(), make_loader())
    scalars = _scalars(tmp_path / "tb" / "rank_0")
    assert [step for step, _ in scalars["train_loss"]] == [4, 8, 12, 16]
    assert [step for step, _ in scalars["val_loss"]] == [8, 16]
    assert scalars["val_loss"][-1][1] == pytest.approx(trainer.logged_metrics["val_loss"])
    # the hook's logger is gone after the fit (loggers=False: no default TensorBoardLogger beside it)
    assert hook.logger is None and not any(type(logger).__name__ == "TensorBoardLogger" for logger in trainer.loggers)


def test_ranks_must_be_a_list():
    with pytest.raises(TypeError, match=r"ranks=\.\.\.\) must be a list of ranks"):
        TensorboardHook(log_dir="tb", ranks=0)
