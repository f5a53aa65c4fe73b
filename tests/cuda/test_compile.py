"""`compile=True` on CUDA (inductor, Triton kernels): the compiled fit trains, lands where the eager fit lands (within
float32 rounding of fused kernels), and its checkpoints hold the eager module's parameter names. One compiled fit
only: compiling for a GPU takes 10-20 s. (tests/trainer/test_compile.py proves the rest with cheaper backends.)"""

from __future__ import annotations

import os
import shutil

import pytest
import torch

from tracktrain import Trainer
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.checkpoint.state import read_checkpoint

from ._tasks import Net, checkpoint_named, make_loader, parameters, quiet

# torch.compile (inductor) generates Triton kernels for CUDA, and Triton builds their launcher with the machine's
# C compiler the first time it runs: without one, compile=True cannot work there, whatever tracktrain does.
_C_COMPILER = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(_C_COMPILER is None, reason="torch.compile's Triton kernels need a C compiler (cc, gcc, clang)"),
    pytest.mark.timeout(240),
]

EPOCHS = 3  # 8 steps each


@pytest.fixture(autouse=True)
def _fresh_compile_cache_and_full_float32():
    """The test starts without the graphs of any test before it, and leaves none behind; its matrix products run in
    full float32, not TF32 (whose coarser rounding, taken differently by eager and compiled kernels, would exceed the
    tolerance), and the setting is put back after."""
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    torch.compiler.reset()
    yield
    torch.compiler.reset()
    torch.set_float32_matmul_precision(precision)


def _fit(root, compile) -> tuple[Net, Trainer]:
    module = Net(lr=0.5)
    checkpoint = ModelCheckpoint(dirpath=root / "ckpt", every_n_train_steps=8, save_top_k=None)
    trainer = Trainer(**quiet(root, max_epochs=EPOCHS, seed=1, compile=compile, callbacks=[checkpoint]))
    trainer.fit(module, make_loader(shuffle=True))
    return module, trainer


def test_a_compiled_fit_on_cuda_trains_what_the_eager_fit_trains_with_the_same_names(tmp_path):
    keys = list(Net().state_dict())
    eager, _ = _fit(tmp_path / "eager", False)
    compiled, trainer = _fit(tmp_path / "compiled", True)

    assert trainer.device.type == "cuda" and compiled.net[0].weight.is_cuda
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1  # something was compiled, and ran
    losses = compiled.loss_values()
    assert len(losses) == EPOCHS * 8
    assert sum(losses[-8:]) < 0.8 * sum(losses[:8]), losses
    torch.testing.assert_close(losses, eager.loss_values(), atol=1e-4, rtol=1e-4)
    expected = parameters(eager)
    for name, tensor in parameters(compiled).items():
        torch.testing.assert_close(tensor, expected[name], atol=1e-4, rtol=1e-4, msg=name)

    # the compiled run's checkpoints hold the eager module's names (no "_orig_mod."): they load either way
    assert list(compiled.state_dict()) == keys
    for step in (8, 16, 24):
        saved = read_checkpoint(checkpoint_named(tmp_path / "compiled" / "ckpt", f"checkpoint_{step}.pt"))
        assert list(saved["model"]) == keys
    Net().load_state_dict(saved["model"])  # the last one: the compiled fit's end
    assert all(torch.equal(saved["model"][name], tensor.cpu()) for name, tensor in parameters(compiled).items())
