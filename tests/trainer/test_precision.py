"""Precision on the CPU: fp32, bf16-mixed and fp16-mixed (GradScaler) train the same model to the same place;
a step with inf/NaN gradients is skipped, counted, and training recovers."""

from __future__ import annotations

import pytest
import torch

from tracktrain import Trainer

from ._tasks import GAN, Classifier, make_loader, quiet


def _train(tmp_path, precision, module=None, **kwargs):
    module = module or Classifier(lr=0.1)
    trainer = Trainer(**quiet(tmp_path, max_epochs=5, precision=precision, **kwargs))
    trainer.fit(module, make_loader(), make_loader(seed=1))
    return module, trainer


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_mixed_precision_lands_where_fp32_does(tmp_path, precision):
    reference, fp32 = _train(tmp_path, "32-true")
    mixed, trainer = _train(tmp_path, precision)
    for a, b in zip(reference.parameters(), mixed.parameters()):
        assert a.dtype == b.dtype == torch.float32  # master weights stay fp32
        torch.testing.assert_close(a, b, atol=0.03, rtol=0.05)
    assert float(trainer.callback_metrics["val_loss"]) == pytest.approx(
        float(fp32.callback_metrics["val_loss"]), abs=0.02
    )


def test_evaluation_runs_under_the_same_autocast(tmp_path):
    dtypes = []

    class Probe(Classifier):
        def eval_step(self, batch, batch_idx):
            dtypes.append(self(batch[0]).dtype)
            super().eval_step(batch, batch_idx)

        def predict_step(self, batch, batch_idx):
            dtypes.append(self(batch).dtype)
            return self(batch)

    module, trainer = _train(tmp_path, "bf16-mixed", module=Probe())
    trainer.predict(dataloaders=[torch.randn(4, 4)])
    assert set(dtypes) == {torch.bfloat16}


class InjectNaN(Classifier):
    """Poisons one gradient at optimizer step `at` (counting from 1) and records the weights around each step."""

    def __init__(self, at):
        super().__init__(lr=0.1)
        self.at = at
        self.before: torch.Tensor | None = None
        self.changed: list[bool] = []

    def on_train_batch_start(self, batch, batch_idx):
        self.before = self.net.weight.detach().clone()

    def on_after_backward(self):
        if self.trainer.global_step + 1 == self.at:
            self.net.weight.grad[0, 0] = float("nan")

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.changed.append(not torch.equal(self.before, self.net.weight))


def test_fp16_skips_a_step_with_nan_gradients_and_recovers(tmp_path):
    module, trainer = _train(tmp_path, "16-mixed", module=InjectNaN(at=20))
    scaler_skips = trainer.model_engine.skipped_steps
    assert module.changed[19] is False  # the poisoned step left the weights alone
    assert all(torch.isfinite(p).all() for p in module.parameters())
    assert sum(1 for changed in module.changed if not changed) == scaler_skips  # every skip is counted
    assert trainer.logged_metrics["amp/skipped_steps"] == scaler_skips
    assert module.changed[-10:] == [True] * 10  # and training goes on
    assert float(trainer.callback_metrics["val_loss"]) < 0.6


def test_grad_scaler_state_is_checkpointed(tmp_path):
    module, trainer = _train(tmp_path, "16-mixed")
    objects = trainer.checkpoint_objects()
    assert objects["grad_scaler"] is trainer.model_engine.scaler
    assert objects["grad_scaler"].state_dict()["scale"] == trainer.model_engine.scaler.get_scale()


def test_fp16_with_manual_optimization_steps_through_the_scaler(tmp_path):
    from tracktrain.trainer.scaled_optimizer import ScaledOptimizer

    module = GAN()
    before = [p.detach().clone() for p in module.parameters()]
    trainer = Trainer(**quiet(tmp_path, max_epochs=2, precision="16-mixed"))
    trainer.fit(module, make_loader())
    assert all(isinstance(optimizer, ScaledOptimizer) for optimizer in trainer.manual_optimizers)
    skipped = trainer.model_engine.skipped_steps
    # 16 batches x 2 optimizers; the first steps may overflow while the scale calibrates, and are skipped
    assert trainer.global_step + skipped == 32 and skipped < 16
    assert all(not torch.equal(a, b) for a, b in zip(before, module.parameters()))
    assert all(torch.isfinite(p).all() for p in module.parameters())


# ------------------------------------------------------------------------- Lightning's "true" precisions
def test_64_true_trains_as_a_hand_written_float64_loop_bit_for_bit(tmp_path):
    """The weights, the floating inputs and what the forward creates in float64; the labels stay integers."""
    import torch.nn.functional as F

    seen = []

    class Recording(Classifier):
        def train_step(self, batch, batch_idx):
            x, y = batch
            seen.append((x.dtype, y.dtype, torch.zeros(1).dtype))
            return super().train_step(batch, batch_idx)

    module = Recording()
    Trainer(**quiet(tmp_path, max_epochs=2, precision="64-true", logger=False)).fit(module, make_loader())

    by_hand = Classifier().double()
    optimizer = torch.optim.SGD(by_hand.parameters(), lr=0.1)
    for _ in range(2):
        for x, y in make_loader():
            optimizer.zero_grad()
            F.cross_entropy(by_hand(x.double()), y).backward()
            optimizer.step()
    assert set(seen) == {(torch.float64, torch.int64, torch.float64)}
    assert torch.get_default_dtype() == torch.float32  # restored after each step
    assert all(p.dtype == torch.float64 for p in module.parameters())
    assert all(torch.equal(a, b) for a, b in zip(module.parameters(), by_hand.parameters()))


@pytest.mark.parametrize(("precision", "dtype"), [("bf16-true", torch.bfloat16), ("16-true", torch.float16)])
def test_half_true_precisions_keep_the_weights_in_half_and_validate_and_load_back(tmp_path, precision, dtype):
    from tracktrain.callbacks import ModelCheckpoint

    trainer = Trainer(
        **{
            **quiet(tmp_path, max_epochs=2, precision=precision, logger=False),
            "callbacks": [ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="val_loss")],
            "enable_checkpointing": True,
        }
    )
    module = Classifier()
    trainer.fit(module, make_loader(), make_loader())

    assert all(p.dtype == dtype for p in module.parameters()) and trainer.model_engine.scaler is None
    (result,) = trainer.validate(module, make_loader())
    assert torch.isfinite(torch.tensor(result["val_loss"]))
    loaded = Classifier.load_from_checkpoint(trainer.checkpoint_callback.best_model_path)
    assert all(torch.equal(a.to(dtype), b) for a, b in zip(loaded.parameters(), module.parameters()))


def test_an_unknown_precision_lists_the_true_ones_too():
    with pytest.raises(ValueError, match=r"'bf16-true', '16-true', '64-true'"):
        Trainer(precision="8-true")
