"""`Trainer(max_time=...)` as Lightning's: the forms it takes, a fit stopped by it (the cut epoch still validates),
and the time trained carried over a resume."""

from __future__ import annotations

import datetime
import time

import pytest

from tests.trainer._tasks import Classifier, make_loader
from tracktrain import Trainer
from tracktrain.trainer.training_time import duration_of


class Slow(Classifier):
    """Each training step takes at least 20 ms, so a time limit is reached after a known least number of steps."""

    def train_step(self, batch, batch_idx):
        time.sleep(0.02)
        return super().train_step(batch, batch_idx)


@pytest.mark.parametrize(
    ("given", "seconds"),
    [("00:01:02:03", 3723), (datetime.timedelta(minutes=5), 300), ({"hours": 1, "seconds": 0.5}, 3600.5)],
)
def test_the_forms_lightning_takes(given, seconds):
    assert duration_of(given).total_seconds() == seconds


@pytest.mark.parametrize(
    ("given", "error", "message"),
    [
        ("1:00", ValueError, "DD:HH:MM:SS"),
        ({"hourz": 1}, ValueError, "hourz"),
        (3600, TypeError, "timedelta"),
        ("00:00:00:00", ValueError, "positive"),
    ],
)
def test_a_bad_max_time_is_refused_naming_the_forms(given, error, message):
    with pytest.raises(error, match=message):
        Trainer(max_time=given)


def fit(tmp_path, max_time, **arguments):
    trainer = Trainer(
        max_time=max_time,
        enable_progress_bar=False,
        logger=False,
        default_root_dir=tmp_path,
        num_sanity_val_steps=0,
        resume="auto",
        **arguments,
    )
    trainer.fit(Slow(), make_loader(n=32, batch_size=8), make_loader(n=16, batch_size=8))
    return trainer


def test_a_fit_stops_at_max_time_and_its_cut_epoch_still_validates(tmp_path):
    started = time.monotonic()
    trainer = fit(tmp_path, {"seconds": 0.5})  # no max_epochs: the time limit alone ends the fit

    took = time.monotonic() - started
    assert trainer.training_time.elapsed() >= 0.5 and took >= 0.5
    assert 1 <= trainer.global_step <= 25  # at least 20 ms a step: at most 25 steps in 0.5 s
    assert "val_loss" in trainer.callback_metrics  # the epoch cut short ended as the run's last: it validated
    assert trainer.settings["trainer"]["max_time"] == "0:00:00.500000"


def test_the_time_trained_carries_over_a_resume(tmp_path):
    first = fit(tmp_path, {"seconds": 0.4})
    steps = first.global_step

    again = fit(tmp_path, {"seconds": 0.4})  # resumed at the limit: one step, decided at its end

    assert again.ckpt_path is not None and again.global_step == steps + 1
    raised = fit(tmp_path, {"seconds": 0.8})  # a raised limit trains on, about as long again
    assert raised.training_time.elapsed() >= 0.8 and raised.global_step > steps + 1
