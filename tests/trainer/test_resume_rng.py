"""A run killed with SIGKILL mid-epoch and started again with the Trainer's defaults (no `deterministic=True`)
finishes bit-identical to the run that was never interrupted, when the model draws from every global generator
(dropout, python's `random`, numpy's) and the loader shuffles: the generators continue from their states at the
checkpoint, on one process and on each of 2 DDP ranks from that rank's own states (the ranks draw differently)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tracktrain.checkpoint.lease import LeaseWarning
from tracktrain.distributed.collectives import spawn

from . import _rng_resume
from ._rng_resume import HOLD_AT, SAVE_EVERY, STEPS, resume_then_uninterrupted

SCRIPT = Path(__file__).with_name("_rng_resume.py")
RESUMED_AT = HOLD_AT // SAVE_EVERY * SAVE_EVERY  # 10: the newest checkpoint before the kill, batch 2 of epoch 1


def kill_mid_epoch(root: Path, ranks: int) -> None:
    """Start the script, wait for it to hold at step HOLD_AT with its checkpoint of step RESUMED_AT committed, and
    SIGKILL every one of its processes (the script, and the ranks spawn started), as a node failure would."""
    errors = root.with_name(f"{root.name}.stderr")  # a file: a full pipe nobody reads would block the script
    with errors.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, str(SCRIPT), str(root), str(ranks)], stdout=subprocess.PIPE, stderr=stderr, text=True
        )
    try:
        line = process.stdout.readline()
        if line.strip() != "holding":
            process.wait(timeout=60)  # it ended on its own
            raise AssertionError(f"the script did not hold: {line!r}\n{errors.read_text()[-3000:]}")
        manifest = root / "checkpoints" / f"checkpoint_{RESUMED_AT}.pt.manifest.json"
        deadline = time.monotonic() + 60
        while not manifest.is_file():  # written in the background: committed once its manifest is there
            assert time.monotonic() < deadline, sorted(p.name for p in (root / "checkpoints").iterdir())
            time.sleep(0.05)
    finally:
        if process.poll() is None:
            try:
                import psutil
            except ImportError:  # the XLA environment: the process alone (it runs no test with ranks)
                process.kill()
            else:
                parent = psutil.Process(process.pid)
                for child in [parent, *parent.children(recursive=True)]:
                    with contextlib.suppress(psutil.NoSuchProcess):
                        child.send_signal(signal.SIGKILL)
        process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL


def check_bit_identical(out: Path, ranks: int) -> None:
    load = lambda name, rank: torch.load(out / f"{name}_rank{rank}.pt", weights_only=True)  # noqa: E731
    resumed = [load("resumed", rank) for rank in range(ranks)]
    reference = [load("uninterrupted", rank) for rank in range(ranks)]
    for rank in range(ranks):
        # it did resume, mid-epoch, from the checkpoint before the kill, and trained to the end
        assert resumed[rank]["ckpt_path"].endswith(f"checkpoint_{RESUMED_AT}.pt"), resumed[rank]["ckpt_path"]
        assert reference[rank]["ckpt_path"] is None
        assert resumed[rank]["global_step"] == reference[rank]["global_step"] == STEPS
        assert sorted(resumed[rank]["draws"]) == list(range(RESUMED_AT + 1, STEPS + 1))
    for rank in range(ranks):
        # every generator of this rank drew, after the resume, what it drew in the uninterrupted run
        for step in range(RESUMED_AT + 1, STEPS + 1):
            assert resumed[rank]["draws"][step] == reference[rank]["draws"][step], (rank, step)
    for rank in range(ranks):
        for name, value in reference[rank]["params"].items():
            assert torch.equal(resumed[rank]["params"][name], value), (rank, name)
    if ranks > 1:  # every generator's state differs between the ranks: restoring rank 0's on rank 1 would show
        first, second = (reference[rank]["draws"][RESUMED_AT + 1] for rank in range(2))
        assert all(mine[0] != theirs[0] for mine, theirs in zip(first, second)), (first, second)


def test_sigkill_mid_epoch_resumes_dropout_and_every_generator_bit_identical(tmp_path):
    kill_mid_epoch(tmp_path / "run", ranks=1)
    with pytest.warns(LeaseWarning, match="no longer running"):  # the killed process's lease, taken over
        resume_then_uninterrupted(str(tmp_path / "run"), str(tmp_path / "reference"), str(tmp_path), 1)
    check_bit_identical(tmp_path, ranks=1)


@pytest.mark.slow  # torchrun, killed and started again; CI runs the slow tests
@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_sigkill_of_ddp_ranks_mid_epoch_resumes_each_rank_from_its_own_generators(tmp_path):
    kill_mid_epoch(tmp_path / "run", ranks=2)
    spawn(
        _rng_resume.resume_then_uninterrupted,
        2,
        args=(str(tmp_path / "run"), str(tmp_path / "reference"), str(tmp_path), 2),
    )
    check_bit_identical(tmp_path, ranks=2)


def test_two_fresh_runs_with_one_seed_are_identical_model_initialization_included(tmp_path):
    """`Trainer(seed=...)` then `fit(Model())`, as the README and the template write it: the model is built after
    the Trainer, so its initial weights follow the seed too, and two fresh runs end with the same weights."""
    from tests.trainer._tasks import Classifier, make_loader, quiet
    from tracktrain import LoopModule, Trainer

    class Unseeded(Classifier):  # initialized from the global generators, as a user's module is
        def __init__(self) -> None:
            LoopModule.__init__(self)  # not Classifier's, which seeds itself
            self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 2))
            self.lr = 0.1

    def fresh_run(name: str) -> dict[str, torch.Tensor]:
        trainer = Trainer(**quiet(tmp_path / name, max_epochs=2, seed=7))
        module = Unseeded()
        trainer.fit(module, make_loader(shuffle=True))
        return {key: value.clone() for key, value in module.state_dict().items()}

    torch.manual_seed(1)  # whatever the generators held before: the Trainer's seed decides
    first = fresh_run("a")
    torch.manual_seed(2)
    second = fresh_run("b")
    assert all(torch.equal(first[key], second[key]) for key in first)
