"""tracktrain.rng: seeding every generator a run draws from, cheaply enough to do for every batch."""

from __future__ import annotations

import random
import traceback
from collections.abc import Iterator

import numpy
import pytest
import torch

from tracktrain import rng


@pytest.fixture
def fresh_backends() -> Iterator[None]:
    """The accelerators available are looked up once per process: forget them around a test that pretends."""
    rng._accelerator_seeders.cache_clear()
    yield
    rng._accelerator_seeders.cache_clear()


def _draws() -> tuple[float, list[float], float]:
    return random.random(), torch.rand(3).tolist(), float(numpy.random.rand())


def test_manual_seed_draws_as_torch_manual_seed_does() -> None:
    torch.manual_seed(1234)
    random.seed(1234)
    numpy.random.seed(1234)
    expected = _draws()
    _draws()  # move every generator on
    rng.manual_seed(1234)
    assert _draws() == expected


def test_manual_seed_seeds_only_available_backends_without_formatting_stacks(
    monkeypatch: pytest.MonkeyPatch, fresh_backends: None
) -> None:
    """torch.manual_seed queues a seed, with a formatted stack trace, for every backend compiled in but not started
    (XPU and MTIA on a CUDA machine): hundreds of µs per batch for a ResumableEngine. Only the backends the process
    can use are seeded, CUDA's with the same call torch.manual_seed makes."""
    seeded: dict[str, list[int]] = {"cuda": [], "xpu": [], "mtia": []}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on a GPU host
    monkeypatch.setattr(torch.cuda, "manual_seed_all", seeded["cuda"].append)
    monkeypatch.setattr(torch.xpu, "manual_seed_all", seeded["xpu"].append)
    monkeypatch.setattr(torch.mtia, "manual_seed_all", seeded["mtia"].append)

    def no_stacks() -> list[str]:
        raise AssertionError("manual_seed formatted a stack trace (a seed queued for a backend not started)")

    monkeypatch.setattr(traceback, "format_stack", no_stacks)
    rng.manual_seed(77)
    rng.manual_seed(78)
    assert seeded == {"cuda": [77, 78], "xpu": [], "mtia": []}


def test_manual_seed_on_a_host_without_accelerators_formats_no_stack(
    monkeypatch: pytest.MonkeyPatch, fresh_backends: None
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(traceback, "format_stack", lambda *_: pytest.fail("a stack trace was formatted"))
    rng.manual_seed(5)
    assert torch.initial_seed() == 5
