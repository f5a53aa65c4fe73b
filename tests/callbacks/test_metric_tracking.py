"""LossTracker and AccuracyTracker against the same quantities computed directly from the model and the data."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tracktrain.callbacks.metric_tracking import AccuracyTracker, LossTracker, prediction_and_target

from .conftest import TinyModule, batches


class StepLossRecorder(TinyModule):
    """Keeps every training step's loss, per epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.losses: list[list[float]] = []

    def on_train_epoch_start(self) -> None:
        self.losses.append([])

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.losses[-1].append(float(outputs.detach()))


def direct(module: TinyModule, data) -> tuple[float, float]:
    """(cross-entropy, accuracy) of the module over all of `data` at once."""
    x, y = torch.cat([inputs for inputs, _ in data]), torch.cat([targets for _, targets in data])
    with torch.no_grad():
        scores = module.net(x)
    return F.cross_entropy(scores, y).item(), (scores.argmax(dim=1) == y).double().mean().item()


def test_train_loss_avg_is_the_mean_of_the_epochs_step_losses(make_trainer):
    trainer = make_trainer(max_epochs=3, callbacks=[LossTracker()])
    module = StepLossRecorder()
    trainer.fit(module, batches(4))
    expected = [sum(losses) / len(losses) for losses in module.losses]
    assert trainer.recorder.values_of("train_loss_avg") == pytest.approx(expected, rel=1e-6)
    assert trainer.recorder.steps_of("train_loss_avg") == [4, 8, 12]
    assert float(trainer.callback_metrics["train_loss_avg"]) == pytest.approx(expected[-1], rel=1e-6)


def test_val_and_test_loss_and_accuracy_match_a_direct_computation(make_trainer):
    val_data, test_data = batches(3, batch_size=5, seed=1), batches(2, batch_size=7, seed=2)
    trainer = make_trainer(max_epochs=2, callbacks=[LossTracker(F.cross_entropy), AccuracyTracker()])
    module = TinyModule()
    trainer.fit(module, batches(4), val_data)
    loss, accuracy = direct(module, val_data)
    assert trainer.recorder.values_of("val_loss_avg")[-1] == pytest.approx(loss, rel=1e-6)
    assert trainer.recorder.values_of("val_accuracy")[-1] == accuracy
    assert len(trainer.recorder.values_of("val_accuracy")) == 2

    [validated] = trainer.validate(module, val_data)
    assert validated["val_accuracy"] == accuracy and validated["val_loss_avg"] == pytest.approx(loss, rel=1e-6)
    [tested] = trainer.test(module, test_data)
    loss, accuracy = direct(module, test_data)
    assert tested["test_accuracy"] == accuracy and tested["test_loss_avg"] == pytest.approx(loss, rel=1e-6)
    assert float(trainer.callback_metrics["test_accuracy"]) == accuracy


def test_a_plain_model_fit_as_a_supervised_module(make_trainer):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    trainer = make_trainer(max_epochs=1, callbacks=[AccuracyTracker()])
    data = batches(3, seed=4)
    trainer.fit(
        model,
        batches(2),
        data,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        criterion=torch.nn.CrossEntropyLoss(),
    )
    with torch.no_grad():
        expected = torch.cat([(model(x).argmax(1) == y) for x, y in data]).double().mean().item()
    assert float(trainer.callback_metrics["val_accuracy"]) == expected


def test_tuple_outputs_custom_transforms_and_train_accuracy(make_trainer):
    class TupleModule(TinyModule):
        def train_step(self, batch, batch_idx):
            x, y = batch
            scores = self.net(x)
            return {"loss": F.cross_entropy(scores, y), "scores": scores, "labels": y}

        def eval_step(self, batch, batch_idx):
            x, y = batch
            return self.net(x), y

    pick = lambda output: (output["scores"], output["labels"]) if isinstance(output, dict) else output  # noqa: E731
    trainer = make_trainer(
        max_epochs=1,
        callbacks=[
            LossTracker(output_transform=lambda output: output["loss"] * 2),
            AccuracyTracker(pick, stages=("fit", "validate")),
        ],
    )
    module = TupleModule()
    data = batches(1, batch_size=16)  # one batch: the epoch's accuracy is the accuracy of that batch
    with torch.no_grad():
        scores_before = module.net(data[0][0])
    trainer.fit(module, data, data)
    y = data[0][1]
    assert trainer.callback_metrics["train_accuracy"] == (scores_before.argmax(1) == y).double().mean().item()
    assert trainer.callback_metrics["val_accuracy"] == direct(module, data)[1]
    expected_loss = 2 * F.cross_entropy(scores_before, y).item()
    assert trainer.recorder.values_of("train_loss_avg")[0] == pytest.approx(expected_loss)


def test_an_output_without_predictions_is_a_clear_error(make_trainer):
    class LogOnly(TinyModule):
        def eval_step(self, batch, batch_idx):
            super().eval_step(batch, batch_idx)

    with pytest.raises(TypeError, match=r"reads \(y_pred, y\) from the step's output, which was None.*'target'"):
        make_trainer(callbacks=[AccuracyTracker()]).fit(LogOnly(), batches(1), batches(1))
    with pytest.raises(TypeError, match=r"a dict with keys \['logits'\]"):
        prediction_and_target({"logits": torch.zeros(1)})


def test_a_train_step_without_a_loss_is_a_clear_error(make_trainer):
    class Manual(TinyModule):
        automatic_optimization = False

        def train_step(self, batch, batch_idx):
            return {"scores": self.net(batch[0])}

    with pytest.raises(TypeError, match=r"a dict without 'loss' \(keys \['scores'\]\).*output_transform"):
        make_trainer(callbacks=[LossTracker()]).fit(Manual(), batches(1))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match=r"tracks the loss of validation and test predictions with loss_fn"):
        LossTracker(stages=("fit", "validate"))
    with pytest.raises(ValueError, match=r"non-empty subset of \['fit', 'validate', 'test'\], got \['train'\]"):
        AccuracyTracker(stages="train")
    with pytest.raises(TypeError, match=r"loss_fn=...\) must be callable"):
        LossTracker(loss_fn="cross_entropy")
    with pytest.raises(TypeError, match=r"AccuracyTracker\(output_transform=...\) must be callable"):
        AccuracyTracker(output_transform=None)
