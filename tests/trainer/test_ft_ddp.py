"""strategy="ft_ddp" (torchft): two replica groups at a lighthouse started here; one is SIGKILLed mid-fit and
restarted, rejoins, is healed from the survivor, and both end with the same weights. Also the errors of a bad
lighthouse address."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch

pytest.importorskip("torchft")

from tracktrain.trainer.strategies import FTDDPStrategy  # noqa: E402
from tracktrain.trainer.strategies.ft_ddp import check_lighthouse  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LIGHTHOUSE = Path(sys.executable).with_name("torchft_lighthouse")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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


@pytest.mark.distributed
@pytest.mark.timeout(240)
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
        _wait(lambda: any(p == 1 for _, p, _ in _steps(survivor_log)), 60, "group 0 did not go on alone")
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
