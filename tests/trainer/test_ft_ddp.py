"""strategy="ft_ddp" (torchft): two replica groups at a lighthouse started here; one is SIGKILLed mid-fit and
restarted, rejoins, is healed from the survivor, and both end with the same weights. Also the errors of a bad
lighthouse address."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import types
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tracktrain import LoopModule, Trainer
from tracktrain.trainer.strategies import FTDDPStrategy
from tracktrain.trainer.strategies.ft_ddp import PARTICIPANTS, check_lighthouse

needs_torchft = pytest.mark.skipif(importlib.util.find_spec("torchft") is None, reason="torchft is not installed")

ROOT = Path(__file__).resolve().parents[2]
LIGHTHOUSE = Path(sys.executable).with_name("torchft_lighthouse")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@needs_torchft
def test_unreachable_lighthouse_is_named_within_the_connect_timeout():
    port = free_port()  # nothing listens there
    started = time.monotonic()
    with pytest.raises(ConnectionError, match=f"No torchft lighthouse answers at http://127.0.0.1:{port}"):
        FTDDPStrategy(lighthouse=f"http://127.0.0.1:{port}", connect_timeout=timedelta(seconds=2)).setup_environment(
            torch.device("cpu")
        )
    assert time.monotonic() - started < 5
    with pytest.raises(ValueError, match="Not a lighthouse address"):
        check_lighthouse("http://127.0.0.1", timedelta(seconds=1))


@needs_torchft
def test_no_lighthouse_given(monkeypatch):
    monkeypatch.delenv("TORCHFT_LIGHTHOUSE", raising=False)
    with pytest.raises(ValueError, match="TORCHFT_LIGHTHOUSE"):
        FTDDPStrategy().setup_environment(torch.device("cpu"))


def test_bad_arguments():
    with pytest.raises(ValueError, match="group=2"):
        FTDDPStrategy(group=2, groups=2)
    with pytest.raises(ValueError, match="min_replicas"):
        FTDDPStrategy(min_replicas=0)


def _group(group: int, steps: int, out: Path, env: dict[str, str]) -> tuple[subprocess.Popen, Path]:
    log = out.with_suffix(".log")
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.trainer._ft_group", str(group), "2", str(steps), str(out)],
        cwd=ROOT,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    return process, log


def _steps(log: Path) -> list[tuple[int, int, str]]:
    lines = [line.split() for line in log.read_text().splitlines() if line.startswith("step ")]
    return [(int(words[1]), int(words[3]), words[5]) for words in lines]


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.1)


@needs_torchft
@pytest.mark.distributed
@pytest.mark.timeout(240)
@pytest.mark.slow  # three processes and a lighthouse: timed waits, in the slow tier (-n 0), not beside 2 xdist workers
def test_killed_group_rejoins_healed_and_ends_equal(tmp_path):
    port = free_port()
    lighthouse = subprocess.Popen(
        [str(LIGHTHOUSE), "--bind", f"127.0.0.1:{port}", "--min_replicas", "1", "--join_timeout_ms", "1000"]
        + ["--heartbeat_timeout_ms", "1000"],  # a killed group is dropped from the quorum after 1 s
        stdout=(tmp_path / "lighthouse.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    env = {**os.environ, "TORCHFT_LIGHTHOUSE": f"http://127.0.0.1:{port}"}
    processes = [lighthouse]
    try:
        _wait(lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0, 30, "the lighthouse did not start")
        steps = 200
        survivor, survivor_log = _group(0, steps, tmp_path / "g0.pt", env)
        victim, victim_log = _group(1, steps, tmp_path / "g1.pt", env)
        processes += [survivor, victim]
        _wait(lambda: len(_steps(victim_log)) >= 30, 120, "group 1 did not reach step 30")
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(10)
        killed_at = time.monotonic()
        _wait(lambda: any(p == 1 for _, p, _ in _steps(survivor_log)), 120, "group 0 did not go on alone")
        restarted, restarted_log = _group(1, steps, tmp_path / "g1.pt", env)
        processes.append(restarted)
        _wait(lambda: bool(_steps(restarted_log)), 120, "the restarted group 1 took no step")
        back_after = time.monotonic() - killed_at
        assert survivor.wait(180) == 0, survivor_log.read_text()[-3000:]
        assert restarted.wait(60) == 0, restarted_log.read_text()[-3000:]
        survived, rejoined = _steps(survivor_log), _steps(restarted_log)
        # the survivor never restarted and counted every step; some ran alone while group 1 was down
        assert [step for step, _, _ in survived] == list(range(1, steps + 1))
        assert any(participants == 1 for _, participants, _ in survived)
        # the restarted group started at the survivor's step (healed), not at 1, and stepped with it
        first = rejoined[0][0]
        assert first > 30 and rejoined[-1][0] == steps
        by_step = {step: checksum for step, _, checksum in survived}
        assert all(by_step[step] == checksum for step, _, checksum in rejoined)
        a, b = torch.load(tmp_path / "g0.pt"), torch.load(tmp_path / "g1.pt")
        assert a["global_step"] == b["global_step"] == steps
        for name, value in a["params"].items():
            assert torch.equal(value, b["params"][name]), name
        alone = sum(participants == 1 for _, participants, _ in survived)
        print(
            f"\ngroup 1 killed after step 30+; group 0 ran {alone} steps alone; group 1 restarted at once after, took "
            f"its first step (step {first}, healed) {back_after:.1f} s after the kill"
        )
    finally:
        for process in reversed(processes):
            if process.poll() is None:
                process.kill()  # by its PID
                process.wait(10)


# ---------------------------------------------------------------- one group on a stand-in torchft (no lighthouse run)
EVENTS: list[str] = []


class FakeManager:
    """torchft's Manager as the strategy uses it, recording the calls: one group alone, every step committed."""

    def __init__(self, **options):
        self.options = options

    def start_quorum(self):
        EVENTS.append("quorum")

    def should_commit(self):
        EVENTS.append("commit")
        return True

    def num_participants(self):
        return 2

    def allreduce(self, tensor):
        return types.SimpleNamespace(wait=lambda: tensor)

    def shutdown(self, wait=False):
        EVENTS.append("shutdown")


@pytest.fixture
def fake_torchft(monkeypatch):
    """A stand-in `torchft` module, and a socket listening where the strategy's lighthouse is."""
    module = types.ModuleType("torchft")
    module.Manager = FakeManager
    module.ProcessGroupGloo = module.ProcessGroupNCCL = lambda timeout: object()
    module.DistributedDataParallel = lambda manager, wrapped: wrapped
    monkeypatch.setitem(sys.modules, "torchft", module)
    EVENTS.clear()
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        yield f"http://127.0.0.1:{listening.getsockname()[1]}"


class Net(LoopModule):
    def __init__(self, interval: str = "step") -> None:
        super().__init__()
        self.net = nn.Linear(4, 2)
        self.interval = interval

    def train_step(self, batch, batch_idx):
        EVENTS.append("forward")
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 2, 0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": self.interval}}


class ZeroHookNet(Net):
    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        EVENTS.append("zero_grad")
        optimizer.zero_grad()


def fit(lighthouse: str, module: LoopModule, **options) -> Trainer:
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(0))
    loader = DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8)
    settings = {
        "strategy": FTDDPStrategy(lighthouse=lighthouse),
        "max_steps": 3,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
    }
    trainer = Trainer(**{**settings, **options})
    trainer.fit(module, loader)
    return trainer


def test_each_step_joins_its_quorum_before_its_forward_and_steps_on_a_commit(fake_torchft, tmp_path):
    fit(fake_torchft, Net(), default_root_dir=tmp_path)
    assert EVENTS == ["quorum", "forward", "commit"] * 3 + ["shutdown"]
    EVENTS.clear()  # a module's own optimizer_zero_grad runs once the quorum formed, not instead of it
    fit(fake_torchft, ZeroHookNet(), default_root_dir=tmp_path)
    assert EVENTS == ["quorum", "zero_grad", "forward", "commit"] * 3 + ["shutdown"]


def test_the_participants_are_published_with_the_step_values(fake_torchft, tmp_path):
    trainer = fit(fake_torchft, Net(), log_every_n_steps=1, default_root_dir=tmp_path)
    assert trainer.logged_metrics[PARTICIPANTS] == 2.0


@pytest.mark.parametrize(
    ("interval", "options", "message"),
    [
        ("epoch", {}, r"""interval='epoch'.*"interval": "step\""""),
        ("step", {"max_epochs": 2, "max_steps": None}, "max_epochs=2, max_steps=None.*max_steps=N, max_epochs=None"),
        ("step", {"max_epochs": 2}, "max_epochs=2, max_steps=3"),
        ("step", {"accumulate_grad_batches": 2}, "accumulates gradients.*accumulate_grad_batches=1"),
    ],
    ids=["epoch-scheduler", "max-epochs", "max-epochs-and-steps", "accumulation"],
)
def test_what_hangs_on_a_groups_own_epoch_is_refused_at_setup(fake_torchft, tmp_path, interval, options, message):
    """A healed group's epoch position is its own: epoch schedulers, epoch limits and accumulation windows would make
    the groups' weights diverge silently, so the fit refuses them before its first step."""
    with pytest.raises(ValueError, match=message):
        fit(fake_torchft, Net(interval), default_root_dir=tmp_path, **options)
    assert "quorum" not in EVENTS and "forward" not in EVENTS  # refused before any step
