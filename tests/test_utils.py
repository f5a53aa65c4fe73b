"""`tracktrain.utils`, Ignite's `ignite.utils` under its path: the same results as Ignite 0.5.5's on the same inputs."""

from __future__ import annotations

import collections
import io
import logging
import random

import pytest
import torch

import tracktrain.utils as ours

ignite_utils = pytest.importorskip("ignite.utils")

Point = collections.namedtuple("Point", "x y")


def test_apply_to_type_walks_mappings_named_tuples_and_sequences_as_ignite():
    value = {"a": [torch.ones(2), (torch.zeros(1), "text")], "p": Point(torch.ones(1), b"raw")}
    for lib in (ours, ignite_utils):
        result = lib.apply_to_tensor(value, lambda t: t + 1)
        assert isinstance(result["p"], Point) and result["p"].y == b"raw"
        assert result["a"][1][1] == "text" and isinstance(result["a"][1], tuple)
        assert torch.equal(result["a"][0], torch.full((2,), 2.0))
    with pytest.raises(TypeError, match="x must contain <class 'torch.Tensor'>, dicts or lists; found <class 'int'>"):
        ours.apply_to_tensor([torch.ones(1), 3], lambda t: t)
    assert ours.apply_to_type([1, (2, 3)], int, lambda n: n * 10) == ignite_utils.apply_to_type(
        [1, (2, 3)], int, lambda n: n * 10
    )


def test_convert_tensor_moves_tensors_and_passes_other_values():
    batch = (torch.ones(2, dtype=torch.float64), {"y": torch.zeros(1)})
    moved = ours.convert_tensor(batch, device="cpu")
    assert torch.equal(moved[0], batch[0]) and moved[1]["y"].device.type == "cpu"
    assert ours.convert_tensor(batch) is batch
    assert ours.convert_tensor((torch.ones(1), 3), device="cpu")[1] == 3  # Ignite raises a TypeError here
    from tracktrain.engine import convert_tensor

    assert convert_tensor is ours.convert_tensor


def test_to_onehot_as_ignite():
    indices = torch.tensor([[0, 2], [1, 1]])
    assert torch.equal(ours.to_onehot(indices, 3), ignite_utils.to_onehot(indices, 3))
    assert ours.to_onehot(indices, 3).dtype == torch.uint8
    with pytest.raises(ValueError, match="num_classes must be a positive int, got 0"):
        ours.to_onehot(indices, 0)
    with pytest.raises(TypeError, match="indices must be a tensor"):
        ours.to_onehot([0, 1], 2)


def test_manual_seed_seeds_python_and_torch_as_ignite():
    draws = []
    for lib in (ours, ignite_utils):
        lib.manual_seed(12)
        draws.append((random.random(), torch.rand(3).tolist()))
    assert draws[0] == draws[1]


def test_setup_logger_prints_once_per_job_and_keeps_an_existing_logger(tmp_path):
    stream = io.StringIO()
    path = tmp_path / "log.txt"
    logger = ours.setup_logger(
        "tracktrain-test-logger", stream=stream, filepath=path, format="%(levelname)s %(message)s"
    )
    logger.info("hello")
    assert stream.getvalue() == "INFO hello\n" and path.read_text() == "INFO hello\n"
    assert not logger.propagate
    assert ours.setup_logger("tracktrain-test-logger", level=logging.ERROR) is logger
    assert logger.level == logging.INFO  # an existing logger is returned as it is
    ours.setup_logger("tracktrain-test-logger", stream=stream, level=logging.ERROR, reset=True)
    assert len(logger.handlers) == 1 and logger.level == logging.ERROR

    other = ours.setup_logger("tracktrain-test-logger-rank1", distributed_rank=1)
    assert [type(h) for h in other.handlers] == [logging.NullHandler]


def test_hash_checkpoint_as_ignite(tmp_path):
    results = {}
    for lib, folder in ((ours, "ours"), (ignite_utils, "ignite")):
        path = tmp_path / f"{folder}-model.pt"
        path.write_bytes(b"the same checkpoint bytes" * 1000)
        results[folder] = lib.hash_checkpoint(str(path), str(tmp_path / folder))
    (mine, sha), (theirs, their_sha) = results["ours"], results["ignite"]
    assert sha == their_sha and mine.name.replace("ours", "ignite") == theirs.name
    assert mine.exists() and not (tmp_path / "ours-model.pt").exists()
    with pytest.raises(FileNotFoundError, match="missing.pt does not exist"):
        ours.hash_checkpoint(tmp_path / "missing.pt", tmp_path)
