"""The tuning tests run many short fits of tiny models: one intra-op thread each (more only contend, on a loaded
machine by tens of milliseconds a step), put back after each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
