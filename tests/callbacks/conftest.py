"""A tiny LoopModule on synthetic data, a Trainer factory, a recording tracker and a per-test DistributedLogger."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tracktrain.distributed.logger import DistributedLogger, get_dist_logger
from tracktrain.loggers.base import Logger
from tracktrain.trainer import LoopModule, Trainer

LINE = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] INFO (\S+)( \[rank \d+\])? - (.*)$")


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny tensors: the intra-op thread pool only adds waiting (milliseconds per op on a 2-core machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def batches(n_batches: int = 4, batch_size: int = 8, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`n_batches` (inputs (B, 3), class indices (B,)) pairs, the same for a given seed."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_batches * batch_size, 3, generator=g)
    y = torch.randint(0, 2, (n_batches * batch_size,), generator=g)
    return list(zip(x.split(batch_size), y.split(batch_size)))


class TinyModule(LoopModule):
    """A linear classifier: logs `train_loss` per step and, in validation, `val_loss` or — with `val_script` — the
    scripted value of the current validation run (the n-th run logs `val_script[n]`; the sanity check, the first
    value) as `val_metric`."""

    def __init__(self, val_script: Sequence[float] | None = None, lr: float = 0.1) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Linear(3, 2)
        self.val_script = list(val_script) if val_script is not None else None
        self.lr = lr
        self.validations = 0

    def train_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def eval_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        x, y = batch
        output = self.net(x)
        if self.val_script is None:
            self.log("val_loss", F.cross_entropy(output, y))
        else:
            self.log("val_metric", self.val_script[self.validations])
        return {"output": output, "target": y}

    def on_validation_end(self) -> None:
        if not self.trainer.sanity_checking:  # the sanity check's batches are no validation of the script
            self.validations += 1

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class RecordingLogger(Logger):
    """A logger (the Trainer's Logger protocol, in memory) that keeps every `log_metrics(values, step)` call."""

    name = "recording"

    def __init__(self) -> None:
        self.calls: list[tuple[int, dict[str, float]]] = []
        self.axes: list[tuple[int, dict[str, float]]] = []
        self.status: str | None = None

    @property
    def run_id(self) -> str:
        return "in-memory"

    def start(self, root_dir: str) -> None:
        pass

    def log_hyperparams(self, params) -> None:
        pass

    def finalize(self, status: str) -> None:
        self.status = status

    def log_metrics(self, values: dict[str, float], step: int) -> None:
        # the axes the Trainer adds to every publish are kept apart: the callbacks' own values are compared exactly
        axes = {name: values[name] for name in ("epoch", "samples_seen") if name in values}
        self.axes.append((step, axes))
        self.calls.append((step, {name: value for name, value in values.items() if name not in axes}))

    def values_of(self, name: str) -> list[float]:
        return [values[name] for _, values in self.calls if name in values]

    def steps_of(self, name: str) -> list[int]:
        return [step for step, values in self.calls if name in values]


class RecordingTrainer(Trainer):
    """A Trainer that also holds the test's `RecordingLogger` as `recorder` (a subclass declares what it adds)."""

    own_attributes = frozenset({"recorder"})


@pytest.fixture
def make_trainer(tmp_path: Path) -> Callable[..., Trainer]:
    """`make_trainer(**options)`: a Trainer without progress bar or checkpoints under tmp_path, with a
    `RecordingLogger` as `trainer.recorder`."""

    def make(**options: Any) -> Trainer:
        options.setdefault("max_epochs", 1)
        recorder = RecordingLogger()
        trainer = RecordingTrainer(
            enable_progress_bar=False,
            enable_checkpointing=False,
            default_root_dir=tmp_path,
            loggers=[recorder],
            **options,
        )
        trainer.recorder = recorder
        return trainer

    return make


@pytest.fixture
def dist_logger(request: pytest.FixtureRequest, tmp_path: Path):
    """A DistributedLogger of this test's own (shared loggers live as long as the process) writing to
    `tmp_path/logs/rank_0.log`; its file closed after the test."""
    logger = get_dist_logger(f"callbacks-{request.node.nodeid}")
    logger.log_to_file(tmp_path / "logs")
    yield logger
    close_files(logger)


def close_files(logger: DistributedLogger) -> None:
    for handler in list(logger.logger.handlers):
        if isinstance(handler, logging.FileHandler):
            logger.logger.removeHandler(handler)
            handler.close()


def logged_messages(path: Path) -> list[str]:
    """The message part of every line of a DistributedLogger file."""
    messages = []
    for line in path.read_text().splitlines():
        match = LINE.match(line)
        assert match is not None, line
        messages.append(match.group(3))
    return messages
