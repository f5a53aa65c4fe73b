"""`ModelSummary` / `summarize`: layers to a depth, trainable and frozen counts (a shared parameter once), the size of
the parameters; the Trainer's default summary at each fit's start, switched off by `enable_model_summary=False`.
(Under FSDP each rank's share: `tests/trainer/test_fsdp.py`.)"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tracktrain import Trainer
from tracktrain.callbacks import ModelSummary
from tracktrain.callbacks.model_summary import summarize

from ..trainer._tasks import Classifier, make_loader


class _Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, 128), nn.ReLU())
        self.decoder = nn.Linear(128, 64)
        self.head = nn.Linear(128, 64)
        self.head.weight = self.decoder.weight  # shared: counted once
        self.encoder[0].weight.requires_grad_(False)


def test_summary_counts_layers_trainable_and_frozen_parameters_once_each():
    table = summarize(_Tied(), max_depth=1)
    assert [(layer.name, layer.kind, layer.parameters) for layer in table.layers] == [
        ("encoder", "Sequential", 64 * 128 + 128),
        ("decoder", "Linear", 128 * 64 + 64),
        ("head", "Linear", 128 * 64 + 64),
    ]
    assert table.frozen_parameters == 64 * 128
    assert table.total_parameters == 64 * 128 + 128 + 128 * 64 + 64 + 64  # the tied weight once
    assert table.total_bytes == 4 * table.total_parameters and not table.sharded
    text = str(table)
    assert "encoder | Sequential | 8.3 K  | partly" in text and "8.2 K     Non-trainable params" in text
    assert [layer.name for layer in summarize(_Tied(), max_depth=-1).layers] == [
        "encoder",
        "encoder.0",
        "encoder.1",
        "decoder",
        "head",
    ]
    assert summarize(_Tied(), max_depth=0).layers == [] and "Name" not in str(summarize(_Tied(), max_depth=0))
    half = summarize(nn.Linear(4, 4).to(torch.bfloat16))
    assert half.total_bytes == 2 * 20


def test_bad_depth_says_what_it_takes():
    with pytest.raises(ValueError, match=r"max_depth=-2: use -1 \(every layer\), 0"):
        ModelSummary(max_depth=-2)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_trainer_logs_the_summary_at_each_fit_start_unless_switched_off(tmp_path, capfd, enabled):
    trainer = Trainer(
        max_epochs=1,
        enable_progress_bar=False,
        enable_checkpointing=False,
        loggers=False,
        default_root_dir=tmp_path,
        enable_model_summary=enabled,
        max_steps=4,  # the first fit stops before the limit of epochs: the second one trains
    )
    trainer.fit(Classifier(), make_loader())
    trainer.max_steps = 8
    trainer.fit(Classifier(), make_loader())  # a second fit: a second summary
    err = capfd.readouterr().err
    assert err.count("Model summary of Classifier") == (2 if enabled else 0)
    if enabled:
        assert "0 | net  | Linear | 10     | yes" in err and "10        Total params" in err
