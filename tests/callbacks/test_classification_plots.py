"""ConfusionMatrixPlot: real fits of a 3-class classifier. The matrix of the last validation is the one counted by hand
from the final weights over the validation set (logits or class indices alike, and summed over the ranks under DDP),
each plotted epoch leaves two valid PNGs that reach a tracker through the real delivery queue (and MLflow's store),
the published per-class values are the matrix's, and bad outputs are refused naming what came and what is expected."""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests._file_tracker import FileTracker
from tracktrain import LoopModule, Trainer
from tracktrain.callbacks.classification_plots import ConfusionMatrixPlot, per_class_metrics
from tracktrain.distributed.collectives import spawn
from tracktrain.distributed.ranks import global_rank

from ..trainer._tasks import quiet

CLASSES = 3


def data(n: int, seed: int) -> TensorDataset:
    """Inputs (n, 4) and 3 classes, each the argmax of a fixed linear map (learnable, not yet learnt in 2 epochs)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    y = (x @ torch.tensor([[1.0, 0.0, -1.0], [0.5, 1.0, 0.0], [0.0, -0.5, 1.0], [0.2, 0.2, 0.2]])).argmax(1)
    return TensorDataset(x, y)


def loaders() -> tuple[DataLoader, DataLoader]:
    return DataLoader(data(64, seed=0), batch_size=16), DataLoader(data(48, seed=1), batch_size=8)


class ThreeClasses(LoopModule):
    """A linear 3-class classifier; `eval_step` returns what `respond(logits, y)` makes of the batch (by default
    `{"output": logits, "target": y}`, SupervisedModule's layout)."""

    def __init__(self, respond=None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Linear(4, CLASSES)
        self.respond = respond or (lambda logits, y: {"output": logits, "target": y})
        self.seen = 0  # validation samples this process evaluated

    def train_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def eval_step(self, batch, batch_idx):
        x, y = batch
        if not self.trainer.sanity_checking:  # the fit's validations only
            self.seen += len(y)
        return self.respond(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def by_hand(net: nn.Module, dataset: TensorDataset) -> torch.Tensor:
    """matrix[true, predicted] of `net` over `dataset`, counted one sample at a time."""
    matrix = torch.zeros(CLASSES, CLASSES, dtype=torch.int64)
    with torch.no_grad():
        for x, y in zip(*dataset.tensors):
            matrix[int(y), int(net(x).argmax())] += 1
    return matrix


def artifacts(target: Path) -> list[tuple[str, str, int]]:
    """(file name, artifact path, step) of every artifact the FileTracker received."""
    records = [json.loads(line) for line in target.read_text().splitlines()]
    return [(os.path.basename(r["local_path"]), r["artifact_path"], r["step"]) for r in records if "local_path" in r]


def fit(tmp_path: Path, plot: ConfusionMatrixPlot, module: ThreeClasses, epochs: int = 2, **options) -> Trainer:
    trainer = Trainer(**quiet(tmp_path / "root", max_epochs=epochs, callbacks=[plot], **options))
    trainer.fit(module, *loaders())
    return trainer


# ----------------------------------------------------------------------------------------------------- one process
@pytest.mark.parametrize("outputs", ["logits", "class indices"])
def test_the_matrix_is_the_final_weights_counted_by_hand_and_each_epoch_leaves_two_pngs_at_the_tracker(
    tmp_path, outputs
):
    respond = None if outputs == "logits" else (lambda logits, y: {"output": logits.argmax(1), "target": y})
    module = ThreeClasses(respond)
    tracker = FileTracker(str(tmp_path / "tracker.jsonl"), linger=0.0)
    plot = ConfusionMatrixPlot(CLASSES, class_names=["cat", "dog", "eel"], normalize=None)
    trainer = fit(tmp_path, plot, module, loggers=[tracker])

    expected = by_hand(module.net, loaders()[1].dataset)
    assert plot.matrix is not None and torch.equal(plot.matrix, expected)
    assert int(expected.sum()) == 48 and len(expected.diagonal().nonzero()) == CLASSES  # every class seen

    names = [os.path.basename(path) for path in plot.image_paths]  # 4 training batches per epoch
    assert names == [
        "confusion_matrix_epoch0_step4.png",
        "per_class_metrics_epoch0_step4.png",
        "confusion_matrix_epoch1_step8.png",
        "per_class_metrics_epoch1_step8.png",
    ]
    assert sorted(os.listdir(tmp_path / "root" / "plots")) == sorted(names)
    for path in plot.image_paths:
        with Image.open(path) as image:
            assert image.format == "PNG" and min(image.size) > 100
            image.verify()
    assert artifacts(tmp_path / "tracker.jsonl") == [(name, "plots", 4 + 4 * (i // 2)) for i, name in enumerate(names)]

    precision, recall, f1 = per_class_metrics(expected)
    for index in range(CLASSES):
        assert trainer.logged_metrics[f"val_recall_class{index}"] == pytest.approx(float(recall[index]))
        assert trainer.logged_metrics[f"val_precision_class{index}"] == pytest.approx(float(precision[index]))
        assert trainer.logged_metrics[f"val_f1_class{index}"] == pytest.approx(float(f1[index]))
    actual, predicted = expected.sum(1), expected.sum(0)
    assert float(recall[2]) == pytest.approx(int(expected[2, 2]) / int(actual[2]))
    assert float(precision[2]) == pytest.approx(int(expected[2, 2]) / int(predicted[2]))


def test_every_n_epochs_plots_only_those_epochs_and_a_validate_of_its_own(tmp_path):
    module = ThreeClasses()
    plot = ConfusionMatrixPlot(CLASSES, every_n_epochs=2, publish_metrics=False, dirpath=tmp_path / "images")
    trainer = fit(tmp_path, plot, module, epochs=3)
    assert [os.path.basename(path) for path in plot.image_paths] == [
        "confusion_matrix_epoch1_step8.png",
        "per_class_metrics_epoch1_step8.png",
    ]
    assert not any(name.startswith("val_recall") for name in trainer.logged_metrics)
    trainer.validate(module, loaders()[1])  # after the fit: epochs finished = 3
    assert (
        len(plot.image_paths) == 4 and os.path.basename(plot.image_paths[-1]) == "per_class_metrics_epoch3_step12.png"
    )
    assert torch.equal(plot.matrix, by_hand(module.net, loaders()[1].dataset))


@pytest.mark.parametrize(
    ("respond", "error", "message"),
    [
        (lambda logits, y: None, TypeError, "validation batch 0 returned NoneType None"),
        (lambda logits, y: logits, TypeError, "validation batch 0 returned Tensor"),
        (lambda logits, y: {"logits": logits, "target": y}, KeyError, "returned keys ['logits', 'target']"),
        (lambda logits, y: {"output": logits, "target": [1]}, TypeError, "'target' is list [1], not a tensor"),
        (lambda logits, y: {"output": logits, "target": y.float()}, TypeError, "torch.float32 tensor: give class"),
        (lambda logits, y: {"output": logits[:, :2], "target": y}, ValueError, "2 scores per sample in dim 1"),
        (lambda logits, y: {"output": logits[:, 0], "target": y}, ValueError, "logits need one more dim"),
        (lambda logits, y: {"output": logits.argmax(1)[:2], "target": y}, ValueError, "(2,), its 'target' (8,)"),
        (lambda logits, y: {"output": logits, "target": y + 1}, ValueError, "predictions or targets outside 0..2"),
    ],
)
def test_outputs_it_cannot_read_are_refused_naming_what_came_and_what_is_expected(tmp_path, respond, error, message):
    plot = ConfusionMatrixPlot(CLASSES)
    with pytest.raises(error) as raised:
        fit(tmp_path, plot, ThreeClasses(respond), epochs=1)
    assert message in str(raised.value)
    if "outside" not in message:
        assert "a mapping with 'output' (logits (N, C, ...) or class indices) and 'target'" in str(raised.value)
    assert plot.image_paths == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_classes": 1}, "num_classes=...) must be an int >= 2, got 1"),
        ({"num_classes": 3, "every_n_epochs": 0}, "every_n_epochs=...) must be a positive int, got 0"),
        ({"num_classes": 3, "normalize": "rows"}, "normalize=...) must be one of"),
        ({"num_classes": 3, "class_names": ["a", "b"]}, "must name the 3 classes, got 2 names"),
        ({"num_classes": 3, "dirpath": "s3://bucket/plots"}, "must be a local directory, got 's3://bucket/plots'"),
    ],
)
def test_bad_arguments_are_refused_naming_the_value(options, message):
    with pytest.raises(ValueError) as raised:
        ConfusionMatrixPlot(**options)
    assert message in str(raised.value)


def test_importing_and_building_the_callback_leaves_matplotlib_unimported():
    """In this process (a fresh one costs seconds): the callback's module imported anew, matplotlib's forgotten."""

    def ours(name: str) -> bool:
        return name.split(".")[0] == "matplotlib" or name == "tracktrain.callbacks.classification_plots"

    saved = {name: module for name, module in sys.modules.items() if ours(name)}
    for name in saved:
        del sys.modules[name]
    try:
        importlib.import_module("tracktrain.callbacks.classification_plots").ConfusionMatrixPlot(3)
        assert not any(name.split(".")[0] == "matplotlib" for name in sys.modules)
    finally:
        for name in [name for name in sys.modules if ours(name)]:
            del sys.modules[name]
        sys.modules.update(saved)


# ------------------------------------------------------------------------------------------------------------- DDP
def _fit_ddp(out: str) -> None:
    module = ThreeClasses()
    plot = ConfusionMatrixPlot(CLASSES, dirpath=os.path.join(out, "images"))
    trainer = Trainer(**quiet(out, max_epochs=2, strategy="ddp", callbacks=[plot], accelerator="cpu"))
    trainer.fit(module, *loaders())  # 24 validation samples per rank
    torch.save(
        {"matrix": plot.matrix, "images": plot.image_paths, "weights": module.net.state_dict(), "seen": module.seen},
        os.path.join(out, f"rank{global_rank()}.pt"),
    )


@pytest.mark.distributed
@pytest.mark.slow  # ~10 s: two processes and a gloo group
@pytest.mark.timeout(120)
def test_under_ddp_the_matrix_is_summed_over_the_ranks_and_rank_zero_alone_draws(tmp_path):
    spawn(_fit_ddp, 2, args=(str(tmp_path),))
    ranks = [torch.load(tmp_path / f"rank{rank}.pt") for rank in (0, 1)]
    net = nn.Linear(4, CLASSES)
    net.load_state_dict(ranks[0]["weights"])
    expected = by_hand(net, loaders()[1].dataset)  # one process, the whole validation set, the final weights
    assert int(expected.sum()) == 48 and [r["seen"] for r in ranks] == [48, 48]  # 2 validations of 24 per rank
    assert torch.equal(ranks[0]["matrix"], expected) and torch.equal(ranks[1]["matrix"], expected)
    assert len(ranks[0]["images"]) == 4 and ranks[1]["images"] == []
    assert sorted(os.listdir(tmp_path / "images")) == sorted(os.path.basename(p) for p in ranks[0]["images"])


# ---------------------------------------------------------------------------------------------------------- MLflow
@pytest.mark.slow
def test_the_images_reach_an_mlflow_run(tmp_path, monkeypatch):
    tracking = pytest.importorskip("mlflow.tracking")
    from tracktrain_integrations.mlflow import MLflowLogger

    monkeypatch.chdir(tmp_path)  # MLflow's default artifact root is ./mlruns: never the repository's
    logger = MLflowLogger()
    plot = ConfusionMatrixPlot(CLASSES)
    fit(tmp_path, plot, ThreeClasses(), epochs=1, loggers=[logger])

    client = tracking.MlflowClient(logger.tracking_uri)
    listed = sorted(artifact.path for artifact in client.list_artifacts(logger.run_id, "plots"))
    assert listed == ["plots/confusion_matrix_epoch0_step4.png", "plots/per_class_metrics_epoch0_step4.png"]
    local = client.download_artifacts(logger.run_id, listed[0], str(tmp_path / "down"))
    with Image.open(local) as image:
        assert image.format == "PNG" and image.size == Image.open(plot.image_paths[0]).size
    history = client.get_metric_history(logger.run_id, "val_recall_class0")
    assert [metric.step for metric in history] == [4]
