"""strategy="ft_ddp" (torchft): two replica groups at a lighthouse started here; one is SIGKILLed mid-fit and
restarted, rejoins, is healed from the survivor, and both end with the same weights; both are SIGKILLed after a
checkpoint and restarted, resume it and end bit-identical to an uninterrupted run (or, having resumed different
steps, both refuse). Also the errors of a bad lighthouse address."""

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
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.checkpoint.discovery import committed_checkpoints
from tracktrain.trainer.strategies import FTDDPStrategy
from tracktrain.trainer.strategies.ft_ddp import MANAGER_ENTRY, PARTICIPANTS, check_lighthouse

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


def _group(
    group: int, steps: int, out: Path, env: dict[str, str], every: int | None = None, log: Path | None = None
) -> tuple[subprocess.Popen, Path]:
    log = log or out.with_suffix(".log")
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.trainer._ft_group", str(group), "2", str(steps), str(out)]
        + ([str(every)] if every else []),
        cwd=ROOT,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    return process, log


def _steps(log: Path) -> list[tuple[int, int, str]]:
    lines = [line.split() for line in log.read_text().splitlines() if line.startswith("step ")]
    return [(int(words[1]), int(words[3]), words[5]) for words in lines]


def _managed(log: Path) -> dict[int, tuple[str, int]]:
    """step -> (parameter checksum, torchft Manager step) of a worker's log."""
    lines = [line.split() for line in log.read_text().splitlines() if line.startswith("step ")]
    return {int(words[1]): (words[5], int(words[7])) for words in lines}


def _resumed(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith("resumed ")]


def _committed_steps(root: Path) -> list[int]:
    return sorted(c.summary["global_step"] for c in committed_checkpoints(root / "checkpoints")[0])


def _lighthouse(log: Path, min_replicas: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen(
        [str(LIGHTHOUSE), "--bind", f"127.0.0.1:{port}", "--min_replicas", str(min_replicas)]
        + ["--join_timeout_ms", "1000", "--heartbeat_timeout_ms", "1000"],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        _wait(lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0, 30, "the lighthouse did not start")
    except TimeoutError:
        process.kill()
        raise
    return process, f"http://127.0.0.1:{port}"


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in reversed(processes):
        if process.poll() is None:
            process.kill()  # by its PID
            process.wait(10)


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


STEPS, EVERY, HOLD = 40, 10, 25  # checkpoints at 10, 20, 30, 40; both groups are killed at step 25


def _held_and_killed(tmp_path: Path, name: str, env: dict[str, str], processes: list) -> tuple[Path, Path]:
    """Both groups train with checkpoints every EVERY steps, stop after step HOLD and are SIGKILLed there."""
    outs = tmp_path / f"{name}0.pt", tmp_path / f"{name}1.pt"
    held = [_group(g, STEPS, outs[g], {**env, "HOLD_AT": str(HOLD)}, EVERY) for g in (0, 1)]
    processes += [process for process, _ in held]
    for _, log in held:
        _wait(lambda log=log: "holding" in log.read_text(), 120, f"{log.name} did not reach step {HOLD}")
    for process, _ in held:
        os.kill(process.pid, signal.SIGKILL)
    for process, _ in held:
        process.wait(10)
    return outs


@needs_torchft
@pytest.mark.distributed
@pytest.mark.timeout(240)
@pytest.mark.slow  # two runs of two groups and a lighthouse each, side by side: timed waits
def test_every_group_killed_and_restarted_resumes_its_checkpoint_exactly(tmp_path):
    """The lighthouse waits for both groups (--min_replicas 2), as a cold restart that is to resume exactly needs:
    a group that stepped alone before the other arrived would heal it to its step, with the other's data position."""
    processes: list[subprocess.Popen] = []
    try:
        whole_lighthouse, whole_address = _lighthouse(tmp_path / "whole-lighthouse.log", 2)
        cut_lighthouse, cut_address = _lighthouse(tmp_path / "cut-lighthouse.log", 2)
        processes += [whole_lighthouse, cut_lighthouse]
        # the uninterrupted run, beside the one that is killed
        whole = [
            _group(g, STEPS, tmp_path / f"whole{g}.pt", {**os.environ, "TORCHFT_LIGHTHOUSE": whole_address}, EVERY)
            for g in (0, 1)
        ]
        processes += [process for process, _ in whole]
        env = {**os.environ, "TORCHFT_LIGHTHOUSE": cut_address}
        outs = _held_and_killed(tmp_path, "cut", env, processes)
        for out in outs:  # killed after the checkpoint of step 20 committed, before that of step 30
            assert _committed_steps(Path(f"{out}.root")) == [10, 20]
        restarted = [_group(g, STEPS, outs[g], env, EVERY, log=tmp_path / f"cut{g}-restarted.log") for g in (0, 1)]
        processes += [process for process, _ in restarted]
        for process, log in whole + restarted:
            assert process.wait(120) == 0, log.read_text()[-3000:]
        for g, (_, log) in enumerate(restarted):
            assert _resumed(log) == [f"resumed {outs[g]}.root/checkpoints/checkpoint_20.pt 20"]
            steps = _managed(log)
            # the Manager resumed at the checkpoint's step (21 after step 21), not at 0: no group was healed
            assert sorted(steps) == list(range(21, STEPS + 1))
            expected = _managed(whole[g][1])
            assert all(steps[step] == expected[step] for step in steps), (steps, expected)
        final = [torch.load(tmp_path / "whole0.pt"), torch.load(tmp_path / "whole1.pt")] + [torch.load(o) for o in outs]
        assert all(result["global_step"] == STEPS for result in final)
        for name, value in final[0]["params"].items():
            assert all(torch.equal(value, result["params"][name]) for result in final[1:]), name
    finally:
        _stop(processes)


@needs_torchft
@pytest.mark.distributed
@pytest.mark.timeout(240)
@pytest.mark.slow
def test_groups_restarted_from_different_checkpoints_both_refuse_naming_the_steps(tmp_path):
    """Group 1's newest checkpoint is lost (as when it was killed before its save committed): it resumes step 10,
    group 0 step 20. torchft would heal group 1 to group 0's step with its own data position; both refuse instead,
    before any optimizer step, so neither writes a checkpoint."""
    processes: list[subprocess.Popen] = []
    try:
        lighthouse, address = _lighthouse(tmp_path / "lighthouse.log", 2)
        processes.append(lighthouse)
        env = {**os.environ, "TORCHFT_LIGHTHOUSE": address}
        outs = _held_and_killed(tmp_path, "g", env, processes)
        for path in (Path(f"{outs[1]}.root") / "checkpoints").glob("checkpoint_20.pt*"):
            path.unlink()
        restarted = [_group(g, STEPS, outs[g], env, EVERY, log=tmp_path / f"g{g}-restarted.log") for g in (0, 1)]
        processes += [process for process, _ in restarted]
        codes = [process.wait(90) for process, _ in restarted]
        logs = [log.read_text() for _, log in restarted]
        assert codes[0] != 0 and codes[1] != 0, logs
        assert (
            "RuntimeError: strategy='ft_ddp': replica group 1 resumed global step 10, but group 0 resumed global step 20"
            in logs[1]
        )
        assert "RuntimeError: strategy='ft_ddp': replica group 0 resumed its checkpoint at global step 20" in logs[0]
        assert "Trainer(resume=PATH)" in logs[0] and "Trainer(resume=PATH)" in logs[1]
        assert not any(line.startswith("step ") for log in logs for line in log.splitlines())  # nothing stepped
        assert _committed_steps(Path(f"{outs[0]}.root")) == [10, 20]
        assert _committed_steps(Path(f"{outs[1]}.root")) == [10]
    finally:
        _stop(processes)


# ---------------------------------------------------------------- one group on a stand-in torchft (no lighthouse run)
EVENTS: list[str] = []


class FakeManager:
    """torchft's Manager as the strategy uses it, recording the calls: one group alone, every step committed."""

    def __init__(self, **options):
        self.options = options
        self.step = 0

    def start_quorum(self):
        EVENTS.append("quorum")

    def should_commit(self):
        EVENTS.append("commit")
        self.step += 1
        return True

    def state_dict(self):
        return {"step": self.step, "batches_committed": 2 * self.step}

    def load_state_dict(self, state):
        EVENTS.append(f"manager at {state['step']}")
        self.step = state["step"]

    def batches_committed(self):
        return 2 * self.step

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


# refusing the other group's checkpoint rolls the objects loaded before back; the fresh engine's state has no seed
@pytest.mark.filterwarnings("ignore:The state_dict has no 'seed'")
def test_a_checkpoint_holds_the_manager_step_and_belongs_to_its_group(fake_torchft, tmp_path):
    """The Manager step is saved and restored with the checkpoint (a checkpoint without it, another strategy's,
    starts the Manager at its global step); a group given another group's checkpoint is refused by name."""
    saving = ModelCheckpoint(every_n_train_steps=2, save_top_k=-1, async_save=False)
    fit(fake_torchft, Net(), default_root_dir=tmp_path, enable_checkpointing=True, callbacks=[saving])
    path = tmp_path / "checkpoints" / "checkpoint_2.pt"
    assert torch.load(path, weights_only=False)[MANAGER_ENTRY] == {"step": 2, "batches_committed": 4, "group": 0}
    EVENTS.clear()
    fit(fake_torchft, Net(), default_root_dir=tmp_path / "resumed", resume=path, max_steps=4)
    assert EVENTS[0] == "manager at 2" and EVENTS.count("forward") == 2
    states = torch.load(path, weights_only=False)
    del states[MANAGER_ENTRY]
    torch.save(states, tmp_path / "without.pt")
    EVENTS.clear()
    fit(fake_torchft, Net(), default_root_dir=tmp_path / "without", resume=tmp_path / "without.pt", max_steps=4)
    assert EVENTS[0] == "manager at 2"
    other = FTDDPStrategy(lighthouse=fake_torchft, group=1, groups=2)
    with pytest.raises(ValueError, match="replica group 1 is resuming a checkpoint of group 0.*own Trainer"):
        fit(fake_torchft, Net(), default_root_dir=tmp_path / "other", resume=path, max_steps=4, strategy=other)
