"""`TQDMProgressBar(refresh_rate=N)`, Lightning's (issue 35): the bar is redrawn every N batches of each epoch and
at its end, not at the times tqdm picks; 0 turns it off. `TrainerProgressBar(refresh_rate=...)` is the same bar."""

from __future__ import annotations

import io
import re

import pytest

from tests.trainer._tasks import Classifier, make_loader, quiet
from tracktrain import Trainer
from tracktrain.callbacks import TQDMProgressBar, TrainerProgressBar


def _frames(bar, epochs: int = 2, n: int = 64) -> list[list[int]]:
    """The step each redraw showed, per epoch (8 batches an epoch with n=64)."""
    trainer = Trainer(**{**quiet(".", max_epochs=epochs, callbacks=[bar]), "enable_progress_bar": True})
    trainer.fit(Classifier(), make_loader(n=n))
    text = bar.bar.tqdm_kwargs["file"].getvalue()
    shown: dict[int, list[int]] = {}
    for epoch, step in re.findall(r"Epoch \[(\d+)/\d+\]: \[(\d+)/\d+\]", text):
        steps = shown.setdefault(int(epoch), [])
        if not steps or steps[-1] != int(step):  # the closing frame repeats the last count
            steps.append(int(step))
    return [shown.get(epoch, []) for epoch in range(1, epochs + 1)]


@pytest.mark.parametrize(("rate", "steps"), [(3, [3, 6, 8]), (1, [1, 2, 3, 4, 5, 6, 7, 8]), (8, [8]), (20, [8])])
def test_the_bar_redraws_every_refresh_rate_batches_of_each_epoch_and_at_its_end(tmp_path, monkeypatch, rate, steps):
    monkeypatch.chdir(tmp_path)
    bar = TQDMProgressBar(refresh_rate=rate, file=io.StringIO(), disable=False)
    assert _frames(bar) == [steps, steps]  # counted within each epoch, as Lightning counts them


def test_an_epoch_length_not_a_multiple_of_the_rate_counts_within_each_epoch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bar = TrainerProgressBar(refresh_rate=4, file=io.StringIO(), disable=False)
    assert _frames(bar, n=48) == [[4, 6], [4, 6]]  # 6 batches: not the run's 8th and 12th


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_refresh_rate_zero_turns_the_bar_and_the_plain_lines_off(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    bar = TQDMProgressBar(refresh_rate=0, file=Terminal())  # a terminal: drawn unless turned off
    assert _frames(bar) == [[], []] and bar.bar.tqdm_kwargs["file"].getvalue() == ""
    assert _frames(TQDMProgressBar(refresh_rate=0, file=io.StringIO())) == [[], []]
    assert "| step " not in capsys.readouterr().err  # no plain lines either (with refresh_rate=1 there are 16)
    assert _frames(TQDMProgressBar(refresh_rate=2, file=Terminal())) == [[2, 4, 6, 8]] * 2


def test_without_a_terminal_a_plain_line_comes_every_refresh_rate_batches(tmp_path, capsys):
    bar = TQDMProgressBar(refresh_rate=3)  # stderr under pytest is not a terminal: plain lines, not bar frames
    trainer = Trainer(**{**quiet(tmp_path, max_epochs=2, callbacks=[bar]), "enable_progress_bar": True})
    trainer.fit(Classifier(), make_loader())
    lines = re.findall(r"Epoch (\d)/2 \| step (\d)/8", capsys.readouterr().err)
    assert lines == [(epoch, step) for epoch in "12" for step in "368"]


def test_lightnings_arguments_and_bad_values():
    bar = TQDMProgressBar(refresh_rate=5, process_position=2, leave=True)
    assert (bar.refresh_rate, bar.bar.persist, bar.bar.tqdm_kwargs["position"]) == (5, True, 2)
    assert TQDMProgressBar().refresh_rate == 1 and not TQDMProgressBar().bar.persist  # Lightning's defaults
    with pytest.raises(ValueError, match=r"refresh_rate=\.\.\.\) must be a number of batches >= 0.*got -1"):
        TQDMProgressBar(refresh_rate=-1)
    with pytest.raises(TypeError, match=r"drop mininterval="):
        TrainerProgressBar(refresh_rate=2, mininterval=1.0)
    with pytest.raises(ValueError, match=r"refresh_rate=0\) turns the bar off, and disable=False"):
        TQDMProgressBar(refresh_rate=0, disable=False)
    with pytest.raises(TypeError, match=r"give refresh_rate=.*or plain_every=.*not both"):
        TrainerProgressBar(refresh_rate=2, plain_every=5.0)
    with pytest.raises(TypeError, match=r"leave="):
        TQDMProgressBar(persist=True)


def test_rich_progress_bar_and_model_summary_draw_with_rich(tmp_path, capsys):
    import io

    pytest.importorskip("rich")
    from tracktrain.callbacks import RichModelSummary, RichProgressBar

    screen = io.StringIO()
    bar = RichProgressBar(
        refresh_rate=2, leave=True, console_kwargs={"file": screen, "force_terminal": True, "width": 120}
    )
    trainer = Trainer(
        max_epochs=2, default_root_dir=tmp_path, enable_checkpointing=False, loggers=False,
        callbacks=[bar, RichModelSummary()],
    )  # fmt: skip
    trainer.fit(Classifier(), make_loader())
    drawn = screen.getvalue()
    assert "Epoch 0/1" in drawn and "Epoch 1/1" in drawn and "8/8" in drawn and "train_loss" in drawn
    assert "Trainable params: 10" in capsys.readouterr().out  # the summary's rich table and totals
