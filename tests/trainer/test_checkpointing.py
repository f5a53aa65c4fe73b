"""ModelCheckpoint on the Trainer, callback state in checkpoints, and fit(ckpt_path=...)."""

from __future__ import annotations

import pytest
import torch

from tracktrain import Callback, Trainer
from tracktrain.callbacks import ModelCheckpoint

from ._tasks import Classifier, checkpoint_files, make_loader, quiet


class Scripted(Classifier):
    """Logs a scripted validation score per epoch so the best checkpoints are known in advance."""

    def __init__(self, scores):
        super().__init__()
        self.scores = scores

    def eval_step(self, batch, batch_idx):
        self.log("score", float(self.scores[self.current_epoch]))


def test_top_k_by_a_monitored_metric(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="score", mode="max", save_top_k=2, save_last=True)
    trainer = Trainer(
        **quiet(tmp_path, max_epochs=5, limit_train_batches=2, limit_val_batches=1, callbacks=[checkpoint])
    )
    trainer.fit(Scripted([0.1, 0.9, 0.3, 0.8, 0.2]), make_loader(), make_loader())
    # two batches per epoch: the 0.9 epoch ends at step 4, the 0.8 one at step 8; the last one at step 10
    assert checkpoint_files(tmp_path / "ckpt") == [
        "checkpoint_4_score=0.9000.pt",
        "checkpoint_8_score=0.8000.pt",
        "last_checkpoint_10.pt",
    ]
    assert checkpoint.best_model_path.endswith("checkpoint_4_score=0.9000.pt")
    assert checkpoint.last_model_path.endswith("last_checkpoint_10.pt")


def test_every_n_train_steps(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=3, save_top_k=None)
    trainer = Trainer(**quiet(tmp_path, max_epochs=1, accumulate_grad_batches=2, callbacks=[checkpoint]))
    trainer.fit(Classifier(), make_loader())  # 8 batches, 4 steps
    assert checkpoint_files(tmp_path / "ckpt") == ["checkpoint_3.pt"]


def test_default_checkpointing_goes_to_the_root_dir(tmp_path):
    trainer = Trainer(enable_progress_bar=False, default_root_dir=tmp_path, max_epochs=2, limit_train_batches=2)
    trainer.fit(Classifier(), make_loader())
    assert checkpoint_files(tmp_path / "checkpoints") == ["checkpoint_4.pt"]


def test_monitoring_a_metric_that_was_never_logged(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="val_acc")
    trainer = Trainer(**quiet(tmp_path, max_epochs=1, limit_train_batches=1, callbacks=[checkpoint]))
    with pytest.raises(KeyError, match=r"ModelCheckpoint monitors 'val_acc'.*Logged metrics: \['train_loss'\]"):
        trainer.fit(Classifier(), make_loader())


class Counter(Callback):
    """A callback with state, and checkpoint hooks that add to and read from the checkpoint."""

    def __init__(self):
        self.batches = 0
        self.loaded_extra = None

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.batches += 1

    def on_save_checkpoint(self, trainer, module, checkpoint):
        checkpoint["extra"] = "written by on_save_checkpoint"

    def on_load_checkpoint(self, trainer, module, checkpoint):
        self.loaded_extra = checkpoint.get("extra")

    def state_dict(self):
        return {"batches": self.batches}

    def load_state_dict(self, state_dict):
        self.batches = state_dict["batches"]


def test_resume_from_a_checkpoint_restores_everything_and_ends_where_an_uninterrupted_run_does(tmp_path):
    full = Classifier()
    Trainer(**quiet(tmp_path, max_epochs=4, seed=3)).fit(full, make_loader())

    first = Classifier()
    counter = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=None)
    Trainer(**quiet(tmp_path, max_epochs=2, seed=3, callbacks=[Counter(), counter])).fit(first, make_loader())
    path = tmp_path / "ckpt" / "checkpoint_16.pt"
    assert path.exists()

    resumed, restored_counter = Classifier(), Counter()
    trainer = Trainer(**quiet(tmp_path, max_epochs=4, seed=3, callbacks=[restored_counter]))
    trainer.fit(resumed, make_loader(), ckpt_path=path)
    assert restored_counter.loaded_extra == "written by on_save_checkpoint"
    assert restored_counter.batches == 32  # 16 restored + 16 more
    assert trainer.global_step == 32 and trainer.train_engine.state.epoch == 4
    for a, b in zip(full.parameters(), resumed.parameters()):
        assert torch.equal(a, b)


def test_model_checkpoint_retention_survives_a_resume(tmp_path):
    def trainer(epochs):
        checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="score", mode="max", save_top_k=1)
        return checkpoint, Trainer(
            **quiet(tmp_path, max_epochs=epochs, limit_train_batches=1, limit_val_batches=1, callbacks=[checkpoint])
        )

    scores = [0.5, 0.9, 0.1, 0.2]
    checkpoint, first = trainer(2)
    first.fit(Scripted(scores), make_loader(), make_loader())
    best = checkpoint.best_model_path
    checkpoint, second = trainer(4)
    second.fit(Scripted(scores), make_loader(), make_loader(), ckpt_path=best)
    # the resumed run knows the 0.9 checkpoint is best, so the worse later epochs are not kept
    assert checkpoint_files(tmp_path / "ckpt") == ["checkpoint_2_score=0.9000.pt"]
    assert checkpoint.best_model_path == best


def test_a_corrupt_checkpoint_path_loads_nothing(tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    module = Classifier()
    before = module.net.weight.detach().clone()
    with pytest.raises(Exception, match="bad.pt"):
        Trainer(**quiet(tmp_path, max_epochs=1)).fit(module, make_loader(), ckpt_path=bad)
    assert torch.equal(module.net.weight, before)


def test_deterministic_run_resumed_mid_epoch_is_bit_identical(tmp_path):
    """A run that crashes mid-epoch and resumes from its last step checkpoint ends where an uninterrupted one does."""

    def trainer(**kwargs):
        return Trainer(**quiet(tmp_path, max_epochs=2, seed=5, **kwargs))

    full = Classifier()
    trainer().fit(full, make_loader(shuffle=True))

    class Crash(Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if trainer.global_step == 11:
                raise RuntimeError("killed")

    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=5, save_top_k=1)
    with pytest.raises(RuntimeError, match="killed"):
        trainer(callbacks=[checkpoint, Crash()]).fit(Classifier(), make_loader(shuffle=True))
    assert checkpoint.best_model_path.endswith("checkpoint_10.pt")  # mid-epoch 2 of 8-batch epochs

    resumed = Classifier()
    again = trainer()
    again.fit(resumed, make_loader(shuffle=True), ckpt_path=checkpoint.best_model_path)
    assert again.global_step == 16
    for a, b in zip(full.parameters(), resumed.parameters()):
        assert torch.equal(a, b)


def test_two_stateful_callbacks_under_one_key_are_refused(tmp_path):
    with pytest.raises(ValueError, match="both save their state under state_key 'Counter'"):
        Trainer(**quiet(tmp_path, callbacks=[Counter(), Counter()]))
    two_checkpoints = [ModelCheckpoint(monitor="a"), ModelCheckpoint(monitor="b")]
    trainer = Trainer(**quiet(tmp_path, callbacks=two_checkpoints))
    assert [c for c in trainer.callbacks if isinstance(c, ModelCheckpoint)] == two_checkpoints
