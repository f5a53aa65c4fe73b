"""A checkpoint saved from CUDA tensors resumes bit for bit: a fit stopped mid-epoch and resumed by a new Trainer
(`resume="auto"`) ends with the weights and optimizer state of the fit never stopped, though the model draws from
the CUDA generator (dropout) and the loader shuffles; the checkpoint reads back on the host, as the library loads
it, equal to the device's weights at its step. (tests/trainer/test_resume.py proves the same on the CPU.)"""

from __future__ import annotations

import pytest
import torch

from tracktrain import Callback, Trainer
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.checkpoint.state import read_checkpoint

from ._tasks import Net, checkpoint_named, make_loader, parameters, quiet

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

EPOCHS = 3  # 8 steps each
SAVE_EVERY = 5  # checkpoints at steps 5, 10, 15, 20
STOP_AT = 13  # the stopped fit dies here, mid-epoch 2; the newest checkpoint before it is step 10's
RESUMED_AT = 10


class StopAt(Callback):
    """Raises at global step `step` (the "crash"); keeps a copy of the weights at step `keep` (still on the device)."""

    def __init__(self, step: int, keep: int) -> None:
        self.step, self.keep = step, keep
        self.kept: dict[str, torch.Tensor] = {}

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.keep:
            self.kept = parameters(module)
        if trainer.global_step == self.step:
            raise RuntimeError("crash")


def _trainer(root, callbacks=()) -> Trainer:
    checkpoint = ModelCheckpoint(dirpath=root / "ckpt", every_n_train_steps=SAVE_EVERY, save_top_k=None)
    return Trainer(**quiet(root, max_epochs=EPOCHS, seed=3, resume="auto", callbacks=[checkpoint, *callbacks]))


def _module() -> Net:
    return Net(dropout=0.3, optimizer="adamw", lr=0.01)


def _loader():
    return make_loader(shuffle=True)


def _optimizer_state(trainer: Trainer) -> dict:
    return trainer.optimizers[0].state_dict()["state"]


def test_a_fit_stopped_and_resumed_from_a_cuda_checkpoint_ends_bit_identical(tmp_path):
    reference = _module()
    uninterrupted = _trainer(tmp_path / "full")
    uninterrupted.fit(reference, _loader())
    assert uninterrupted.ckpt_path is None and uninterrupted.global_step == EPOCHS * 8
    assert reference.net[0].weight.is_cuda

    stop = StopAt(STOP_AT, keep=RESUMED_AT)
    with pytest.raises(RuntimeError, match="crash"):
        _trainer(tmp_path / "cut", [stop]).fit(_module(), _loader())
    assert torch.cuda.is_initialized()  # the CUDA generator existed, so its state was saved with the rest

    # the checkpoint, read as the library reads it (onto the host), holds the device's weights at its step
    path = checkpoint_named(tmp_path / "cut" / "ckpt", f"checkpoint_{RESUMED_AT}.pt")
    saved = read_checkpoint(path)
    assert saved["model"].keys() == stop.kept.keys()
    for name, tensor in saved["model"].items():
        assert tensor.device.type == "cpu", name
        assert torch.equal(tensor, stop.kept[name].cpu()), name
    (rng,) = saved["trainer"]["rng_states_per_rank"]  # one rank: its generators' states, the CUDA one's too
    assert "cuda" in rng, sorted(rng)

    resumed = _module()
    again = _trainer(tmp_path / "cut")
    again.fit(resumed, _loader())
    assert again.ckpt_path is not None and again.ckpt_path.endswith(f"checkpoint_{RESUMED_AT}.pt")
    assert again.global_step == uninterrupted.global_step
    assert resumed.net[0].weight.is_cuda

    for name, tensor in parameters(reference).items():
        assert torch.equal(parameters(resumed)[name], tensor), name
    expected, actual = _optimizer_state(uninterrupted), _optimizer_state(again)
    assert expected.keys() == actual.keys()
    for index, state in expected.items():
        assert state.keys() == actual[index].keys()
        for key, value in state.items():
            assert torch.equal(actual[index][key], value), (index, key)
    # the steps after the resume drew the same dropout masks and batches: the same losses, bit for bit
    assert resumed.loss_values() == reference.loss_values()[RESUMED_AT:]
