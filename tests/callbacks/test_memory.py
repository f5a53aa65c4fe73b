"""MemoryMonitor: the process's resident memory, as /proc reports it, grows with a tensor the module keeps."""

from __future__ import annotations

import pytest
import torch

from tracktrain.callbacks.memory import MemoryMonitor, cuda_max_allocated_mb, rss_mb

from .conftest import TinyModule, batches, logged_messages

BIG_MB = 96


class Hoarder(TinyModule):
    """Allocates BIG_MB of ones (written, so really resident) at the start of the second epoch and keeps them."""

    def on_train_epoch_start(self) -> None:
        if self.current_epoch == 1:
            self.hoard = torch.ones(BIG_MB * 1024 * 1024 // 4)


def test_rss_grows_by_a_tensor_kept_alive(make_trainer, dist_logger, tmp_path):
    trainer = make_trainer(max_epochs=2, callbacks=[MemoryMonitor(dist_logger)])
    module = Hoarder()
    trainer.fit(module, batches(2))
    before, after = trainer.recorder.values_of("memory/rss_mb")
    assert after - before >= 0.9 * BIG_MB
    assert trainer.recorder.steps_of("memory/rss_mb") == [2, 4]
    assert float(trainer.callback_metrics["memory/rss_mb"]) == after
    del module.hoard
    assert rss_mb() < after - 0.9 * BIG_MB  # freed: /proc/self/statm is the current size, not the peak
    messages = logged_messages(tmp_path / "logs" / "rank_0.log")
    assert messages == [f"Epoch 1 | memory/rss_mb={before:.4f}", f"Epoch 2 | memory/rss_mb={after:.4f}"]


def test_step_interval_reports_at_the_trainers_log_steps(make_trainer):
    trainer = make_trainer(max_epochs=2, log_every_n_steps=3, callbacks=[MemoryMonitor(logging_interval="step")])
    trainer.fit(TinyModule(), batches(4))
    assert trainer.recorder.steps_of("memory/rss_mb") == [3, 6]


def test_step_interval_reports_once_per_optimizer_step_under_accumulation(make_trainer):
    trainer = make_trainer(
        max_epochs=1, log_every_n_steps=1, accumulate_grad_batches=2, callbacks=[MemoryMonitor(logging_interval="step")]
    )
    trainer.fit(TinyModule(), batches(6))
    assert trainer.recorder.steps_of("memory/rss_mb") == [1, 2, 3]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only case")
def test_no_cuda_value_while_cuda_is_not_initialized(make_trainer):
    trainer = make_trainer(callbacks=[MemoryMonitor()])
    trainer.fit(TinyModule(), batches(1))
    assert cuda_max_allocated_mb() is None
    assert "memory/cuda_max_allocated_mb" not in trainer.callback_metrics


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_peak_covers_a_tensor_allocated_in_training(make_trainer):
    class CudaHoarder(TinyModule):
        def on_train_epoch_start(self) -> None:
            self.hoard = torch.ones(BIG_MB * 1024 * 1024 // 4, device="cuda")

    trainer = make_trainer(accelerator="cuda", callbacks=[MemoryMonitor()])
    trainer.fit(CudaHoarder(), batches(1))
    assert trainer.recorder.values_of("memory/cuda_max_allocated_mb")[0] >= BIG_MB


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match=r'logging_interval=...\) must be "epoch" or "step", got \'batch\''):
        MemoryMonitor(logging_interval="batch")
    with pytest.raises(TypeError, match=r"MemoryMonitor\(logger=...\) takes a DistributedLogger"):
        MemoryMonitor(logger=object())
