"""strategy="fsdp" (FSDP2's fully_shard) on CUDA: one rank started by `tracktrain.distributed.spawn` joins an nccl
process group, trains its sharded parameters on the GPU, writes sharded checkpoints (torch.distributed.checkpoint,
under the manifest), and a fit stopped after one resumes from it in a new Trainer exactly: the full weights and AdamW
moments equal, bit for bit, those of the fit never stopped. (tests/trainer/test_fsdp*.py prove the rest on 2 gloo
ranks on the CPU.)"""

from __future__ import annotations

import json

import pytest
import torch

from tracktrain.distributed.collectives import spawn

from . import _fsdp_run

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.distributed,
    pytest.mark.timeout(180),
]


def test_fsdp_on_one_nccl_rank_resumes_a_sharded_checkpoint_exactly(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACKTRAIN_DIST_TIMEOUT", "60")  # a hung collective fails in a minute
    spawn(_fsdp_run.fits, 1, args=(str(tmp_path),))

    load = lambda path: torch.load(path, weights_only=True)  # noqa: E731
    full, resumed = load(tmp_path / "full" / "trained.pt"), load(tmp_path / "cut" / "trained.pt")
    for record in (full, resumed):
        assert record["backend"] == "nccl" and record["world_size"] == 1
        assert record["device"].startswith("cuda") and record["sharded"] == "DTensor"
        assert record["step"] == _fsdp_run.STEPS
    assert full["ckpt_path"] is None
    assert resumed["ckpt_path"].endswith(f"checkpoint_{_fsdp_run.RESUMED_AT}.dcp")

    # the checkpoint resumed from is a sharded one, committed: its manifest lists the rank's shard and DCP's metadata
    checkpoint = tmp_path / "cut" / "ckpt" / f"checkpoint_{_fsdp_run.RESUMED_AT}.dcp"
    manifest = json.loads(checkpoint.with_name(f"{checkpoint.name}.manifest.json").read_text())
    assert {f"{checkpoint.name}/.metadata", f"{checkpoint.name}/__0_0.distcp"} <= set(manifest["files"])
    assert manifest["summary"]["global_step"] == _fsdp_run.RESUMED_AT

    assert full["params"].keys() == resumed["params"].keys()
    for name, tensor in full["params"].items():
        assert torch.equal(resumed["params"][name], tensor), name
    assert full["moments"].keys() == resumed["moments"].keys()
    for name, state in full["moments"].items():
        for key, value in state.items():
            assert torch.equal(resumed["moments"][name][key], value), (name, key)
