"""The Trainer's progress bar: drawn with the prog_bar values, only where asked, attached once per engine."""

from __future__ import annotations

import io

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
    assert "train_loss=" in text and "val_loss=" in text  # validation values appear once validated
    trainer.fit(Classifier(), make_loader())
    assert sum(1 for h in trainer.train_engine._event_handlers.get("ITERATION_COMPLETED", [])) == 1  # not twice


def test_default_bar_draws_nothing_when_output_is_not_a_terminal(tmp_path, capsys):
    trainer = Trainer(max_epochs=1, enable_checkpointing=False, default_root_dir=tmp_path)
    trainer.fit(Classifier(), make_loader())
    assert any(isinstance(c, TrainerProgressBar) for c in trainer.callbacks)
    assert capsys.readouterr().err == ""  # pytest's captured stderr is not a TTY
