"""Savers ask `tracktrain.distributed.ranks` which rank they are on: before the process group exists, torchrun's RANK decides,
so in a starting run only the saving rank creates, checks, writes or deletes anything."""

from __future__ import annotations

import torch

from tracktrain.checkpoint.savers import FsspecSaver


def test_a_saver_on_another_rank_touches_nothing_before_the_process_group_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    directory = tmp_path / "checkpoints"
    saver = FsspecSaver(directory, save_on_rank=0)
    saver({"w": torch.ones(1)}, "model_1.pt")
    assert not directory.exists()

    monkeypatch.setenv("RANK", "0")
    saver = FsspecSaver(directory, save_on_rank=0)
    saver({"w": torch.ones(1)}, "model_1.pt")
    assert sorted(path.name for path in directory.iterdir()) == ["model_1.pt"]
