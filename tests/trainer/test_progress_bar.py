"""The Trainer's progress bar: drawn with the prog_bar values, only where asked, attached once per engine."""

from __future__ import annotations

import io
import re

import torch

from tracktrain import Trainer
from tracktrain.callbacks import TrainerProgressBar

from ._tasks import Classifier, make_loader, quiet


class ShowsValidation(Classifier):
    def eval_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self(x), y), prog_bar=True)


def test_bar_shows_progress_and_prog_bar_values(tmp_path):
    out = io.StringIO()
    bar = TrainerProgressBar(file=out, disable=False, mininterval=0)
    trainer = Trainer(**{**quiet(tmp_path, max_epochs=2, callbacks=[bar]), "enable_progress_bar": True})
    trainer.fit(ShowsValidation(), make_loader(), make_loader())
    text = out.getvalue()
    assert "8/8" in text and "Epoch [2/2]" in text
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d, +[\d.]+(it/s|s/it)\]", text), text[-500:]  # time left and speed
    assert "train_loss=" in text and "val_loss=" in text  # validation values appear once validated
    trainer.fit(Classifier(), make_loader())
    assert sum(1 for h in trainer.train_engine._event_handlers.get("ITERATION_COMPLETED", [])) == 1  # not twice


def test_default_bar_draws_nothing_when_output_is_not_a_terminal(tmp_path, capsys):
    trainer = Trainer(max_epochs=1, enable_checkpointing=False, default_root_dir=tmp_path, enable_model_summary=False)
    trainer.fit(Classifier(), make_loader())
    assert any(isinstance(c, TrainerProgressBar) for c in trainer.callbacks)
    assert capsys.readouterr().err == ""  # pytest's captured stderr is not a TTY (and the model summary is off)


class Slow(Classifier):
    def train_step(self, batch, batch_idx):
        import time

        time.sleep(0.01)
        return super().train_step(batch, batch_idx)


def test_without_a_terminal_plain_lines_replace_the_bar(tmp_path, capsys):
    bar = TrainerProgressBar(plain_every=0.03)
    trainer = Trainer(**{**quiet(tmp_path, max_epochs=2, callbacks=[bar]), "enable_progress_bar": True})
    trainer.fit(Slow(), make_loader())
    err = capsys.readouterr().err
    assert "\r" not in err and "█" not in err  # no bar frames in a log
    lines = [line for line in err.splitlines() if "| step " in line]
    assert lines, err
    pattern = (
        r"\[.*\] INFO tracktrain - Epoch [12]/2 \| step \d/8 \(\d+%\) \| [\d.]+ it/s \| 0:00:0\d left in "
        r"the epoch \| train_loss=[\d.]+"
    )
    assert all(re.fullmatch(pattern, line) for line in lines), lines


def test_log_lines_never_land_inside_the_bars_line(tmp_path, capsys):
    from tracktrain.callbacks import MetricPrinter

    bar = TrainerProgressBar(disable=False, mininterval=0)  # drawn on stderr, where the log lines go too
    trainer = Trainer(
        **{**quiet(tmp_path, max_epochs=2, callbacks=[bar, MetricPrinter()]), "enable_progress_bar": True}
    )
    trainer.fit(Slow(), make_loader())
    err = capsys.readouterr().err
    assert "█" in err or "8/8" in err  # the bar was drawn
    segments = [segment for segment in re.split(r"[\r\n]", err) if "INFO" in segment]
    assert len(segments) >= 2 and all(segment.startswith("[") for segment in segments), segments
