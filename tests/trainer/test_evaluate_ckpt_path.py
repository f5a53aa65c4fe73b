"""`Trainer.validate/test/predict(ckpt_path=...)`, Lightning's: "best" tests the weights of
`checkpoint_callback.best_model_path`, "last" those of the run's newest complete checkpoint, a path those of that
file; None the module's weights as they are. Each wrong use is an error that names the fix."""

from __future__ import annotations

import pytest
import torch

from tests.trainer._tasks import Classifier, make_loader
from tracktrain import Trainer
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.checkpoint.state import read_checkpoint


class RisingClassifier(Classifier):
    """Learns for two epochs, then climbs its loss: its best validation is not its last epoch's."""

    def train_step(self, batch, batch_idx):
        loss = super().train_step(batch, batch_idx)
        return loss if self.trainer.current_epoch < 2 else -loss


def _trainer(tmp_path, callbacks=None, **options) -> Trainer:
    options = {"max_epochs": 4, "enable_progress_bar": False, "enable_model_summary": False, **options}
    return Trainer(default_root_dir=tmp_path, loggers=False, callbacks=callbacks, **options)


@pytest.fixture
def fitted(tmp_path):
    """A fit whose best checkpoint (by val_loss) is from epoch 2 of 4, and whose last one is kept too."""
    checkpoint = ModelCheckpoint(monitor="val_loss", save_top_k=1, save_last=True)
    trainer = _trainer(tmp_path, [checkpoint])
    module = RisingClassifier()
    trainer.fit(module, make_loader(), make_loader(seed=1))
    assert checkpoint.best_model_score < trainer.callback_metrics["val_loss"]  # the best is not the last epoch
    return trainer, module, checkpoint


def _tested(trainer, module, **options) -> dict[str, float]:
    (metrics,) = trainer.test(module, make_loader(seed=2), **options)
    return metrics


def test_best_tests_the_weights_of_best_model_path(fitted):
    trainer, module, checkpoint = fitted
    last_weights = _tested(trainer, module)
    by_hand = RisingClassifier()
    by_hand.load_state_dict(read_checkpoint(checkpoint.best_model_path)["model"])  # the file, loaded by hand
    expected = _tested(trainer, by_hand)

    assert _tested(trainer, module, ckpt_path="best") == expected
    assert expected != last_weights
    for name, tensor in by_hand.state_dict().items():
        assert torch.equal(module.state_dict()[name], tensor)


def test_last_and_a_path(fitted):
    trainer, module, checkpoint = fitted
    last_weights = _tested(trainer, module)
    best = _tested(trainer, module, ckpt_path=checkpoint.best_model_path)  # a path
    assert best != last_weights
    assert _tested(trainer, module, ckpt_path="last") == last_weights  # back to the newest checkpoint's weights
    assert _tested(trainer, module) == last_weights


def test_validate_and_predict_load_it_too(fitted):
    trainer, module, _ = fitted
    last_outputs = trainer.predict(module, [torch.ones(2, 4)])
    best_outputs = trainer.predict(module, [torch.ones(2, 4)], ckpt_path="best")
    assert not torch.equal(last_outputs[0], best_outputs[0])
    (validated,) = trainer.validate(module, make_loader(seed=2), ckpt_path="last")
    assert validated == _tested(trainer, module)


def test_best_without_a_checkpoint_callback(tmp_path):
    trainer = _trainer(tmp_path, enable_checkpointing=False)
    with pytest.raises(ValueError, match=r'Trainer.test\(ckpt_path=...\): "best" needs a ModelCheckpoint'):
        trainer.test(Classifier(), make_loader(), ckpt_path="best")


def test_best_without_a_monitor_is_the_latest_checkpoint_saved_as_in_lightning(tmp_path):
    trainer = _trainer(tmp_path, max_epochs=2)  # the default ModelCheckpoint keeps the latest, not the best
    module = Classifier()
    trainer.fit(module, make_loader())
    latest = trainer.checkpoint_callback.best_model_path
    assert latest.endswith("checkpoint_16.pt")  # the last save, at the second epoch's end
    with torch.no_grad():
        module.net.weight.zero_()  # the module's weights no longer the checkpoint's
    (best,) = trainer.test(module, make_loader(), ckpt_path="best")
    (again,) = trainer.test(module, make_loader(), ckpt_path=latest)
    assert best == again and not torch.all(module.net.weight == 0)


def test_best_before_any_fit(tmp_path):
    trainer = _trainer(tmp_path, [ModelCheckpoint(monitor="val_loss")])
    with pytest.raises(ValueError, match=r"no best checkpoint yet\. Call trainer.fit"):
        trainer.validate(Classifier(), make_loader(), ckpt_path="best")


def test_last_without_checkpoints(tmp_path):
    trainer = _trainer(tmp_path)
    with pytest.raises(FileNotFoundError, match='"last" found no complete checkpoint'):
        trainer.test(Classifier(), make_loader(), ckpt_path="last")


def test_a_missing_path(tmp_path):
    missing = str(tmp_path / "nothing.pt")
    with pytest.raises(FileNotFoundError, match=rf"no checkpoint at {missing!r}"):
        _trainer(tmp_path).test(Classifier(), make_loader(), ckpt_path=missing)


def test_a_checkpoint_of_another_module(fitted, tmp_path):
    trainer, _, checkpoint = fitted
    other = Classifier()
    other.net = torch.nn.Linear(4, 3)
    before = other.net.weight.clone()
    with pytest.raises(ValueError, match=r"(?s)does not fit Classifier: .*size mismatch.* Pass a checkpoint written"):
        trainer.test(other, make_loader(), ckpt_path=checkpoint.best_model_path)
    assert torch.equal(other.net.weight, before)


@pytest.mark.parametrize("value", [3, b"best", ""])
def test_a_wrong_value(tmp_path, value):
    with pytest.raises(TypeError, match=r"Trainer.test\(ckpt_path=...\) must be"):
        _trainer(tmp_path).test(Classifier(), make_loader(), ckpt_path=value)
