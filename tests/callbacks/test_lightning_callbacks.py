"""Lightning's built-in callbacks that mean the same here, under their names and with their arguments:
`LambdaCallback`, `BasePredictionWriter`, `StochasticWeightAveraging`, `EMAWeightAveraging` (each average compared
with Lightning's own on the same run)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.trainer._tasks import Classifier, make_loader, quiet
from tracktrain import Trainer
from tracktrain.callbacks import BasePredictionWriter, EMAWeightAveraging, LambdaCallback, StochasticWeightAveraging

L = pytest.importorskip("lightning.pytorch")


def test_lambda_callback_calls_the_functions_given_for_its_hooks(tmp_path):
    seen = []
    callback = LambdaCallback(
        on_train_epoch_end=lambda trainer, module: seen.append(("epoch", trainer.current_epoch)),
        on_fit_end=lambda trainer, module: seen.append(("end", trainer.global_step)),
    )
    Trainer(**{**quiet(tmp_path, max_epochs=2), "callbacks": [callback]}).fit(Classifier(), make_loader())
    assert seen == [("epoch", 0), ("epoch", 1), ("end", 16)]
    with pytest.raises(TypeError, match="not a Callback hook"):
        LambdaCallback(on_tarin_epoch_end=print)
    with pytest.raises(TypeError, match="calls no setup hook"):
        LambdaCallback(setup=print)


def test_a_prediction_writer_gets_each_batch_and_the_whole_pass(tmp_path):
    class Writer(BasePredictionWriter):
        def __init__(self) -> None:
            super().__init__(write_interval="batch_and_epoch")
            self.batches, self.epochs = [], []

        def write_on_batch_end(self, trainer, module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
            self.batches.append((batch_idx, tuple(prediction.shape)))

        def write_on_epoch_end(self, trainer, module, predictions, batch_indices):
            self.epochs.append(len(predictions))

    writer = Writer()
    trainer = Trainer(**{**quiet(tmp_path, max_epochs=1), "callbacks": [writer]})
    trainer.predict(Classifier(), [torch.ones(2, 4), torch.ones(3, 4)])
    assert writer.batches == [(0, (2, 2)), (1, (3, 2))] and writer.epochs == [2]


class LightningClassifier(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Linear(4, 2)

    def training_step(self, batch, batch_idx):
        return F.cross_entropy(self.net(batch[0]), batch[1])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_ema_weight_averaging_averages_what_lightnings_does(tmp_path):
    module = Classifier()
    callback = EMAWeightAveraging(decay=0.9, update_starting_at_step=3)
    Trainer(**{**quiet(tmp_path / "ours", max_epochs=3), "callbacks": [callback]}).fit(module, make_loader())
    reference = LightningClassifier()
    L.Trainer(
        max_epochs=3, callbacks=[L.callbacks.EMAWeightAveraging(decay=0.9, update_starting_at_step=3)], logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
    ).fit(reference, make_loader())  # fmt: skip
    for mine, lightnings in zip(module.parameters(), reference.parameters()):
        assert torch.allclose(mine, lightnings, atol=1e-6)


def test_stochastic_weight_averaging_is_swa_with_lightnings_arguments(tmp_path):
    from tracktrain.callbacks import SWA

    averaged = []
    for callback in (
        StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=1, annealing_epochs=1),
        SWA(swa_epoch_start=1, swa_lrs=0.05, annealing_epochs=1, device="cpu"),
    ):
        module = Classifier()
        Trainer(**{**quiet(tmp_path, max_epochs=3), "callbacks": [callback]}).fit(module, make_loader())
        averaged.append(module.net.weight.detach().clone())
    assert torch.equal(*averaged) and StochasticWeightAveraging(swa_lrs=0.1).device == torch.device("cpu")
