"""MetricPrinter: one line per epoch with that epoch's values, read back from a real log file."""

from __future__ import annotations

import re

import pytest

from tracktrain.callbacks.metric_printer import MetricPrinter

from .conftest import TinyModule, batches, logged_messages


def fields(message: str) -> tuple[str, dict[str, float]]:
    """`("Epoch 1/3", {"train_loss": 0.69, ...})` from `Epoch 1/3 | train_loss=0.6900 | ...`."""
    title, *parts = message.split(" | ")
    return title, {name: float(value) for name, value in (part.split("=") for part in parts)}


def test_one_line_per_epoch_with_the_values_the_trainer_published(make_trainer, dist_logger, tmp_path):
    trainer = make_trainer(max_epochs=3, log_every_n_steps=1, callbacks=[MetricPrinter(dist_logger)])
    trainer.fit(TinyModule(), batches(2), batches(2, seed=1))
    lines = [fields(message) for message in logged_messages(tmp_path / "logs" / "rank_0.log")]
    assert [title for title, _ in lines] == ["Epoch 1/3", "Epoch 2/3", "Epoch 3/3"]
    train_losses = trainer.recorder.values_of("train_loss")[1::2]  # the last step of each epoch
    val_losses = trainer.recorder.values_of("val_loss")
    for (_, values), train_loss, val_loss in zip(lines, train_losses, val_losses):
        assert list(values) == ["train_loss", "val_loss"]
        assert values["train_loss"] == pytest.approx(train_loss, abs=5e-5)
        assert values["val_loss"] == pytest.approx(val_loss, abs=5e-5)
    assert len(set(val_losses)) == 3  # three different epochs, three different lines


def test_every_n_epochs_and_no_stale_values(make_trainer, dist_logger, tmp_path):
    trainer = make_trainer(max_epochs=4, val_every_n_epochs=2, callbacks=[MetricPrinter(dist_logger)])
    trainer.fit(TinyModule(), batches(1), batches(1))
    printer_every_2 = MetricPrinter(dist_logger, every_n_epochs=3)
    make_trainer(max_epochs=3, callbacks=[printer_every_2]).fit(TinyModule(), batches(1))
    lines = map(fields, logged_messages(tmp_path / "logs" / "rank_0.log"))
    titles_and_names = [(title, list(values)) for title, values in lines]
    assert titles_and_names == [
        ("Epoch 1/4", ["train_loss"]),  # no validation in epoch 1: the val_loss of no epoch is not shown
        ("Epoch 2/4", ["train_loss", "val_loss"]),
        ("Epoch 3/4", ["train_loss"]),
        ("Epoch 4/4", ["train_loss", "val_loss"]),
        ("Epoch 3/3", ["train_loss"]),
    ]


def test_validate_and_test_print_only_their_own_values(make_trainer, dist_logger, tmp_path):
    trainer = make_trainer(max_epochs=1, callbacks=[MetricPrinter(dist_logger)])
    module = TinyModule()
    trainer.fit(module, batches(1))
    [validated] = trainer.validate(module, batches(2, seed=1))
    [tested] = trainer.test(module, batches(2, seed=2))
    messages = logged_messages(tmp_path / "logs" / "rank_0.log")
    assert [message.split(" | ")[0] for message in messages] == ["Epoch 1/1", "Validation", "Test"]
    assert re.fullmatch(r"Validation \| val_loss=\d\.\d{4}", messages[1])
    assert fields(messages[1])[1]["val_loss"] == pytest.approx(validated["val_loss"], abs=5e-5)
    assert fields(messages[2])[1]["val_loss"] == pytest.approx(tested["val_loss"], abs=5e-5)


def test_max_steps_run_has_no_epoch_total_and_the_default_logger_prints_to_stderr(make_trainer, capsys):
    trainer = make_trainer(max_epochs=None, max_steps=3, callbacks=[MetricPrinter()])
    trainer.fit(TinyModule(), batches(2))
    printed = capsys.readouterr().err
    assert re.search(r"INFO tracktrain - Epoch 1 \| train_loss=\d\.\d{4}\n", printed), printed
    # the second epoch is cut short at max_steps and still ends (its last line), with no "/total"
    assert re.search(r"INFO tracktrain - Epoch 2 \| train_loss=\d\.\d{4}\n", printed), printed
    assert "Epoch 3" not in printed


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match=r"every_n_epochs=...\) must be a positive integer, got 0"):
        MetricPrinter(every_n_epochs=0)
    with pytest.raises(TypeError, match=r"MetricPrinter\(logger=...\) takes a DistributedLogger"):
        MetricPrinter(logger="stderr")
