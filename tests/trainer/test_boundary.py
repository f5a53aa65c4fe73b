"""Decisions at the loop's boundaries (`tracktrain.distributed.boundary`): agreed by all ranks in one exchange, before anyone
acts; a proposal that fails on one rank fails every rank, in seconds; and a 10-epoch DDP fit with validation, a
checkpoint every epoch on a score the ranks disagree on, and early stopping that one rank asks for first, ends
on both ranks at the same step with the same files. Real gloo processes on the CPU."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from tracktrain import Callback, Trainer
from tracktrain.callbacks.early_stopping import EarlyStopping
from tracktrain.callbacks.model_checkpoint import ModelCheckpoint
from tracktrain.distributed.boundary import Boundary, Decision, decide
from tracktrain.distributed.collectives import collective_timeout, init_from_env, spawn

from ._tasks import Classifier, checkpoint_files, make_loader


def _decision(name, value, agree, act, due=None):
    return Decision(Boundary.TRAIN_EPOCH_END, name, propose=lambda: value, agree=agree, act=act, due=due)


# ------------------------------------------------------------------------------------------------ one process
def test_without_a_process_group_the_local_value_is_the_agreed_one():
    taken = {}
    decide(
        [
            _decision("stop", True, "any", lambda v: taken.update(stop=v)),
            _decision("score", 0.25, "rank_zero", lambda v: taken.update(score=v)),
            _decision("skipped", 1.0, "max", lambda v: taken.update(skipped=v), due=lambda: False),
        ]
    )
    assert taken == {"stop": 1.0, "score": 0.25}


def test_a_failing_proposal_raises_its_own_error_and_nothing_acts():
    acted = []

    def failing():
        raise KeyError("val_loss not logged")

    decisions = [
        _decision("first", 1.0, "any", acted.append),
        Decision(Boundary.TRAIN_EPOCH_END, "score", propose=failing, agree="rank_zero", act=acted.append),
    ]
    with pytest.raises(KeyError, match="val_loss not logged"):
        decide(decisions)
    assert acted == []


def test_an_unknown_agreement_is_refused_where_the_decision_is_declared():
    with pytest.raises(ValueError, match="agree='mean' is not one of"):
        _decision("stop", 1.0, "mean", print)


@pytest.mark.parametrize("text", ["0", "-5", "soon", "inf"])
def test_a_bad_collective_timeout_variable_is_named_with_its_value(monkeypatch, text):
    monkeypatch.setenv("TRACKTRAIN_DIST_TIMEOUT", text)
    with pytest.raises(ValueError, match=f"TRACKTRAIN_DIST_TIMEOUT={text!r} must be a positive number of seconds"):
        collective_timeout()


def test_the_test_suite_runs_every_process_group_with_a_short_timeout():
    assert collective_timeout().total_seconds() <= 60  # set by tests/conftest.py for every process the tests start


# ------------------------------------------------------------------------------------------------- two ranks
def _save(out: str, value) -> None:
    Path(out, f"rank{dist.get_rank()}.json").write_text(json.dumps(value))


def _load(out: Path) -> list:
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(2)]


def _count_all_gathers(monkeypatch_target: list[int]):
    real = dist.all_gather

    def counting(*args, **kwargs):
        monkeypatch_target[0] += 1
        return real(*args, **kwargs)

    dist.all_gather = counting


def _agree(out: str) -> None:
    init_from_env()
    rank = dist.get_rank()
    calls = [0]
    _count_all_gathers(calls)
    taken: dict[str, float] = {}
    decide(
        [
            _decision("stop", rank == 1, "any", lambda v: taken.update(stop=v)),
            _decision("largest", 3.0 + rank, "max", lambda v: taken.update(largest=v)),
            _decision("score", math.pi * (rank + 1), "rank_zero", lambda v: taken.update(score=v)),
            _decision("nan score", math.nan if rank == 0 else 1.0, "rank_zero", lambda v: taken.update(nan=str(v))),
        ]
    )
    _save(out, {"taken": taken, "exchanges": calls[0]})


@pytest.mark.distributed
def test_every_rank_acts_on_the_same_agreed_values_after_one_exchange(tmp_path):
    spawn(_agree, 2, args=(str(tmp_path),))
    results = _load(tmp_path)
    assert results[0] == results[1]
    assert results[0]["taken"] == {"stop": 1.0, "largest": 4.0, "score": math.pi, "nan": "nan"}
    assert results[0]["exchanges"] == 1


def _fail_on_rank_one(out: str) -> None:
    init_from_env()
    rank = dist.get_rank()

    def propose():
        if rank == 1:
            raise KeyError("val_loss was not logged on rank 1")
        return 1.0

    started = time.monotonic()
    try:
        decide(
            [
                Decision(
                    Boundary.VALIDATION_END,
                    "EarlyStopping(val_loss)",
                    propose=propose,
                    agree="any",
                    act=lambda agreed: None,
                )
            ]
        )
        outcome = "acted"
    except Exception as error:  # noqa: BLE001 - the test reads what each rank raised
        outcome = f"{type(error).__name__}: {error}"
    _save(out, {"outcome": outcome, "seconds": time.monotonic() - started})


@pytest.mark.distributed
def test_a_proposal_failing_on_one_rank_fails_every_rank_at_once_not_after_a_timeout(tmp_path):
    spawn(_fail_on_rank_one, 2, args=(str(tmp_path),))
    rank0, rank1 = _load(tmp_path)
    assert rank1["outcome"] == "KeyError: 'val_loss was not logged on rank 1'"
    assert rank0["outcome"].startswith(
        "RuntimeError: Rank 1 failed while proposing 'EarlyStopping(val_loss)' at the validation_end boundary"
    )
    assert rank0["seconds"] < 10 and rank1["seconds"] < 10  # the collective timeout is 60 s


def _disagree_on_what_is_due(out: str) -> None:
    init_from_env()
    name = "ModelCheckpoint(score) score" if dist.get_rank() == 0 else "EarlyStopping(score)"
    try:
        decide([_decision(name, 1.0, "any", lambda agreed: None)])
        outcome = "acted"
    except RuntimeError as error:
        outcome = str(error)
    _save(out, {"outcome": outcome})


@pytest.mark.distributed
def test_ranks_that_take_different_decisions_at_a_boundary_are_told_so_instead_of_mixing_values(tmp_path):
    spawn(_disagree_on_what_is_due, 2, args=(str(tmp_path),))
    for rank, result in enumerate(_load(tmp_path)):
        assert result["outcome"].startswith(
            f"The ranks disagree on which decisions are due at the train_epoch_end boundary (this rank, {rank}: "
        )


HANG = """
import torch, torch.distributed as dist
from tracktrain.distributed.collectives import init_from_env, spawn

def mismatched():
    init_from_env()
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(1))  # rank 0 waits here ...
    else:
        dist.barrier()  # ... rank 1 here: the two never meet

if __name__ == "__main__":
    spawn(mismatched, 2)
"""


@pytest.mark.distributed
def test_a_hang_fails_within_the_collective_timeout_with_each_ranks_stack(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text(HANG)
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TRACKTRAIN_DIST_TIMEOUT": "3"},
    )
    seconds = time.monotonic() - started
    assert result.returncode != 0
    assert seconds < 60, seconds
    assert "[rank 0] failed:" in result.stderr and "[rank 1] failed:" in result.stderr, result.stderr[-3000:]
    assert "all_reduce" in result.stderr and "barrier" in result.stderr  # where each one waited


# ---------------------------------------------------------------- a long DDP fit where the ranks see different values
EPOCHS = 10
STOP_AT_EPOCH = 6  # rank 1's signal crosses EarlyStopping's threshold at this (0-based) epoch; rank 0's never does


class RankDependent(Classifier):
    """Logs, without sync_dist, a score that orders the epochs differently on each rank and a signal only rank 1's
    crosses: the ranks' values disagree, their decisions must not."""

    def eval_step(self, batch, batch_idx):
        super().eval_step(batch, batch_idx)
        epoch, rank = self.trainer.current_epoch, dist.get_rank()
        self.log("score", float((epoch * (3 + 4 * rank)) % 7))
        self.log("signal", float(epoch if rank == 1 else 0))


class CountExchanges(Callback):
    def on_fit_start(self, trainer, module):
        self.calls = [0]
        _count_all_gathers(self.calls)


def _long_fit(out: str) -> None:
    early_stopping = EarlyStopping("signal", mode="max", patience=EPOCHS, stopping_threshold=STOP_AT_EPOCH - 0.5)
    checkpoint = ModelCheckpoint(monitor="score", mode="max", save_top_k=2, save_last=True)
    counter = CountExchanges()
    trainer = Trainer(
        max_epochs=EPOCHS,
        enable_progress_bar=False,
        default_root_dir=out,
        strategy="ddp",
        callbacks=[counter, early_stopping, checkpoint],
    )
    module = RankDependent()
    trainer.fit(module, make_loader(shuffle=True), make_loader(n=32, seed=1))
    _save(
        out,
        {
            "stopped_epoch": early_stopping.stopped_epoch,
            "reason": early_stopping.stopping_reason.name,
            "global_step": trainer.global_step,
            "exchanges": counter.calls[0],
            "kept": sorted(name for _, name in checkpoint.state_dict()["best"]["_saved"]),
            "params": [p.detach().flatten().tolist() for p in module.parameters()],
        },
    )


@pytest.mark.slow  # a long fit on 2 ranks; CI runs the slow tests
@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_a_long_ddp_fit_with_disagreeing_ranks_stops_and_saves_as_one(tmp_path):
    spawn(_long_fit, 2, args=(str(tmp_path),))
    rank0, rank1 = _load(tmp_path)
    assert rank1["reason"] == "STOPPING_THRESHOLD" and rank0["reason"] == "NOT_STOPPED"
    assert rank0["stopped_epoch"] == rank1["stopped_epoch"] == STOP_AT_EPOCH
    steps = (STOP_AT_EPOCH + 1) * 4  # 64 samples / 2 ranks / batches of 8
    assert rank0["global_step"] == rank1["global_step"] == steps
    assert rank0["params"] == rank1["params"]
    assert rank0["kept"] == rank1["kept"] and len(rank0["kept"]) == 2
    # one exchange per boundary: each epoch's validation end and its end
    assert rank0["exchanges"] == rank1["exchanges"] == 2 * (STOP_AT_EPOCH + 1)
    # rank 0's scores chose what is kept: epochs with the best (epoch * 3) % 7, i.e. epochs 2 (score 6) and 4 (5)
    files = checkpoint_files(tmp_path / "checkpoints")
    assert [name for name in files if not name.startswith("last")] == sorted(rank0["kept"])
    assert [name.split("_")[1] for name in rank0["kept"]] == ["12", "20"], rank0["kept"]
    assert f"last_checkpoint_{steps}.pt" in files
