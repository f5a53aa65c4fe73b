"""Retention counts every checkpoint (issue 15, item 4): after any number of kills and restarts, a ModelCheckpoint
directory holds exactly what `save_top_k` and `save_last` say, the checkpoint a run resumed from included once a
newer one of its kind is committed; locally and on S3 (moto).

A kill between a newer checkpoint's commit and an older one's deletion leaves a committed checkpoint that the list
recorded in the newer one no longer holds; a resumed run adopts such checkpoints from the directory, ranked by the
priority their manifests recorded, and deletes what the rules push out."""

from __future__ import annotations

import random
import re
import signal
from pathlib import Path

import pytest

from tests.trainer import _resume_run as harness
from tests.trainer._tasks import Classifier, CrashAtStep, make_loader, quiet
from tracktrain import Callback, Trainer, storage
from tracktrain.callbacks import CallbackPhase, ModelCheckpoint
from tracktrain.checkpoint.discovery import committed_checkpoints
from tracktrain.checkpoint.savers import FsspecSaver

SCRIPT = Path(__file__).with_name("_retention_script.py")


def committed(directory: str) -> dict[str, list[str]]:
    """The committed checkpoints of `directory` by kind, each kind sorted by step: {"top": [...], "last": [...]}."""
    found, problems = committed_checkpoints(directory)
    assert problems == []
    by_kind: dict[str, list[str]] = {"top": [], "last": []}
    for checkpoint in sorted(found, key=lambda checkpoint: checkpoint.order):
        by_kind["last" if checkpoint.data_filename.startswith("last_") else "top"].append(checkpoint.data_filename)
    return by_kind


def only_committed_files(directory: str) -> None:
    """Nothing in `directory` but committed checkpoints: no data file without its manifest, no temporary file."""
    names = set(storage.listdir(directory))
    committed_names = {name for kind in committed(directory).values() for name in kind}
    assert names == committed_names | {f"{name}.manifest.json" for name in committed_names}


@pytest.fixture(params=["local", "s3"])
def where(request, tmp_path) -> str:
    if request.param == "local":
        return str(tmp_path / "ckpt")
    return request.getfixturevalue("s3_bucket") + "/runs/ckpt"


class AtStart(Callback):
    """Records the committed checkpoints once ModelCheckpoint's fit start is done (and its deletions with it)."""

    phase = CallbackPhase.LAST  # after ModelCheckpoint (AFTER_DECISIONS)

    def __init__(self, checkpoint: ModelCheckpoint) -> None:
        self.checkpoint = checkpoint
        self.seen: dict[str, list[str]] | None = None

    def on_fit_start(self, trainer, module):
        self.checkpoint.wait()
        self.seen = committed(self.checkpoint.dirpath)


# ------------------------------------------------------------------------------------- in process, deterministic
def test_checkpoints_kills_left_behind_are_counted_and_deleted_at_the_next_start(tmp_path, where, monkeypatch):
    def trainer(*callbacks):
        checkpoint = ModelCheckpoint(dirpath=where, every_n_train_steps=4, save_top_k=2, save_last=2)
        start = AtStart(checkpoint)
        return Trainer(
            **quiet(
                tmp_path, max_epochs=3, seed=1, resume="auto", loggers=False, callbacks=[checkpoint, start, *callbacks]
            )
        ), start

    # every deletion is lost, as when each save is killed right after its commit; then the run dies at step 17
    with monkeypatch.context() as patch:
        patch.setattr(FsspecSaver, "remove", lambda self, filename: None)
        first, _ = trainer(CrashAtStep(17))
        with pytest.raises(RuntimeError, match="killed"):
            first.fit(Classifier(), make_loader())
    steps = [4, 8, 12, 16]
    assert committed(where) == {
        "top": [f"checkpoint_{s}.pt" for s in steps],
        "last": [f"last_checkpoint_{s}.pt" for s in steps],
    }

    again, start = trainer()
    again.fit(Classifier(), make_loader())
    assert again.ckpt_path == storage.join(where, "last_checkpoint_16.pt")
    # before anything new is saved, the rules hold again: the newest two of each kind
    assert start.seen == {
        "top": ["checkpoint_12.pt", "checkpoint_16.pt"],
        "last": ["last_checkpoint_12.pt", "last_checkpoint_16.pt"],
    }
    assert committed(where) == {
        "top": ["checkpoint_20.pt", "checkpoint_24.pt"],
        "last": ["last_checkpoint_20.pt", "last_checkpoint_24.pt"],
    }
    only_committed_files(where)


def test_adopted_checkpoints_rank_by_the_exact_score_and_the_resumed_from_one_goes_after_a_newer_commit(
    tmp_path, monkeypatch
):
    """Scores that differ only past the 4 decimals of the file names: ranking needs the manifest's exact score."""
    scores = [0.50001, 0.50004, 0.50002, 0.50003]
    directory = tmp_path / "ckpt"

    class Scored(Classifier):
        def eval_step(self, batch, batch_idx):
            self.log("val_score", scores[self.current_epoch])

    def trainer():
        checkpoint = ModelCheckpoint(dirpath=directory, monitor="val_score", mode="max", save_top_k=2, save_last=2)
        start = AtStart(checkpoint)
        return Trainer(
            **quiet(
                tmp_path,
                max_epochs=4,
                limit_train_batches=2,
                limit_val_batches=1,
                loggers=False,
                callbacks=[checkpoint, start],
            )
        ), start

    with monkeypatch.context() as patch:  # every deletion lost: all 4 epochs' checkpoints stay
        patch.setattr(FsspecSaver, "remove", lambda self, filename: None)
        trainer()[0].fit(Scored(), make_loader(), make_loader())
    top = {step: f"checkpoint_{step}_val_score=0.5000.pt" for step in (2, 4, 6, 8)}
    assert committed(str(directory)) == {
        "top": list(top.values()),
        "last": [f"last_checkpoint_{step}.pt" for step in (2, 4, 6, 8)],
    }

    # resume from step 4: its own lists know steps 2 and 4 only
    again, start = trainer()
    again.fit(Scored(), make_loader(), make_loader(), ckpt_path=directory / "last_checkpoint_4.pt")
    # the best two by exact score are 0.50004 (step 4) and 0.50003 (step 8); the latest two are 6 and 8, and the
    # checkpoint the run resumed from stays until a newer latest checkpoint is committed
    assert start.seen == {
        "top": [top[4], top[8]],
        "last": ["last_checkpoint_4.pt", "last_checkpoint_6.pt", "last_checkpoint_8.pt"],
    }
    assert committed(str(directory)) == {
        "top": [top[4], top[8]],
        "last": ["last_checkpoint_6.pt", "last_checkpoint_8.pt"],
    }
    only_committed_files(str(directory))


def test_a_new_run_leaves_another_runs_checkpoints_in_the_directory_alone(tmp_path):
    def fit(every, resume):
        checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=every, save_top_k=2, save_last=2)
        Trainer(**quiet(tmp_path, max_epochs=1, resume=resume, loggers=False, callbacks=[checkpoint])).fit(
            Classifier(), make_loader()
        )

    fit(4, resume=None)
    fit(3, resume=None)  # not resuming: these are not its checkpoints
    assert committed(str(tmp_path / "ckpt")) == {
        "top": ["checkpoint_3.pt", "checkpoint_4.pt", "checkpoint_6.pt", "checkpoint_8.pt"],
        "last": ["last_checkpoint_3.pt", "last_checkpoint_4.pt", "last_checkpoint_6.pt", "last_checkpoint_8.pt"],
    }


def test_a_list_longer_than_n_saved_keeps_the_n_best_at_the_next_save(tmp_path):
    """What `adopt` can leave (the resumed-from checkpoint kept beyond n_saved): a save must beat the n-th best, and
    pushes out everything past n_saved. (Ignite would compare with the worst and keep the list that long.)"""
    from torch import nn

    from tracktrain.engine import Engine
    from tracktrain.handlers.checkpoint import Checkpoint

    saver = FsspecSaver(tmp_path)
    for name in ("a.pt", "b.pt", "c.pt"):
        (tmp_path / name).write_bytes(b"x")
    scores = iter([5.0, 8.0])
    checkpoint = Checkpoint(
        {"model": nn.Linear(1, 1)},
        saver,
        score_function=lambda engine: next(scores),
        filename_pattern="{score}.pt",
        n_saved=2,
    )
    checkpoint.load_state_dict({"_saved": [(1.0, "a.pt"), (7.0, "b.pt"), (9.0, "c.pt")]})
    engine = Engine(lambda engine, batch: None)
    checkpoint(engine)  # 5 does not beat the second best, 7
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pt", "b.pt", "c.pt"]
    checkpoint(engine)  # 8 does: a and b go
    assert sorted(p.name for p in tmp_path.iterdir()) == ["8.0000.pt", "c.pt"]
    assert checkpoint.state_dict() == {"_saved": [(8.0, "8.0000.pt"), (9.0, "c.pt")]}


def _fit_with_lost_deletions_then_resume_from_an_older_one(out: str) -> None:
    """Under DDP (2 ranks): a run whose deletions are all lost dies at step 7; the next resumes from step 4, whose
    lists know steps 2 and 4 only. Each rank records its ModelCheckpoint lists once the fit has started."""
    from tests.trainer._ddp import ddp_trainer as _trainer
    from tests.trainer._ddp import save_per_rank as _save

    def fit(callbacks, **kwargs):
        checkpoint = ModelCheckpoint(dirpath=f"{out}/ckpt", every_n_train_steps=2, save_top_k=2, save_last=2)
        trainer = _trainer(out, max_epochs=3, seed=2, callbacks=[checkpoint, *callbacks(checkpoint)])
        trainer.fit(Classifier(), make_loader(), **kwargs)

    class Lists(Callback):
        phase = CallbackPhase.LAST  # after ModelCheckpoint (AFTER_DECISIONS)

        def __init__(self, checkpoint):
            self.checkpoint = checkpoint

        def on_fit_start(self, trainer, module):
            _save(
                out,
                "lists",
                {
                    kind: state["_saved"]
                    for kind, state in self.checkpoint.state_dict().items()
                    if kind in ("best", "last")
                },
            )

    remove = FsspecSaver.remove
    FsspecSaver.remove = lambda self, filename: None
    try:
        fit(lambda checkpoint: [CrashAtStep(7)])
    except RuntimeError:
        pass
    finally:
        FsspecSaver.remove = remove
    fit(lambda checkpoint: [Lists(checkpoint)], ckpt_path=f"{out}/ckpt/last_checkpoint_4.pt")


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_under_ddp_every_rank_takes_the_lists_rank_zero_adopted(tmp_path):
    """Rank 0 reads the directory; rank 1 must not keep the lists of the checkpoint it loaded, or the ranks would
    take different keep-or-skip decisions at a save (which gathers from every rank)."""
    from tests.trainer._ddp import load_per_rank as _load
    from tracktrain.distributed.collectives import spawn

    spawn(_fit_with_lost_deletions_then_resume_from_an_older_one, 2, args=(str(tmp_path),))
    lists = _load(tmp_path, "lists")
    assert (
        lists[0]
        == lists[1]
        == {
            "best": [[4, "checkpoint_4.pt"], [6, "checkpoint_6.pt"]],
            "last": [[4, "last_checkpoint_4.pt"], [6, "last_checkpoint_6.pt"]],
        }
    )


# ------------------------------------------------------------------- real processes killed at random moments
def kill_and_restart(root: str, tmp_path: Path, cycles: int, seed: int, monkeypatch) -> None:
    """Start the resume script `cycles` times, each killed with SIGKILL at a random moment (often between a
    newer checkpoint's commit and an older one's deletion), then once more to the end; the checkpoint directory
    must then hold exactly the newest two of each kind, and never more than one extra of a kind in between."""
    directory = storage.join(root, "checkpoints")
    rng = random.Random(seed)
    out = tmp_path / "out.pt"
    surplus_seen = False
    for cycle in range(cycles):
        # the first kill lands in the window for sure (its deletion is held back until the kill, however loaded the
        # machine); the others anywhere
        if cycle == 0:
            monkeypatch.setenv("RETENTION_TEST_HOLD", "60")
        else:
            monkeypatch.delenv("RETENTION_TEST_HOLD", raising=False)
        run = harness.Run(root, out, 0, script=SCRIPT)  # the harness's script, with deletions announced
        target = "removing" if cycle == 0 else rng.choice(["removing", "removing", "saving", "step"])
        after = rng.randint(1, 3) if target != "step" else rng.randint(2, 9)
        after = 1 if cycle == 0 else after  # the held deletion blocks the saves after it: there is no second one
        seen = 0

        def reached(line: str) -> bool:
            nonlocal seen
            seen += line.startswith(target + " ")
            # from step 40 on, the run is killed at once: the last run must still save, and so delete
            step = re.match(r"step (\d+)$", line)
            return seen >= after or (step is not None and int(step.group(1)) >= 40)

        if run.read_until(reached) is None:  # it ended before the chosen moment: it must have finished
            assert run.finish() == 0 and run.lines[-1] == f"done {harness.STEPS}", (run.lines[-5:], run.stderr[-3000:])
            break
        run.process.send_signal(signal.SIGKILL)
        run.finish()
        kept = committed(directory)
        assert len(kept["top"]) <= 3 and len(kept["last"]) <= 3, (run.lines[-3:], kept)
        surplus_seen |= len(kept["top"]) == 3 or len(kept["last"]) == 3
    assert surplus_seen  # a kill left a checkpoint that no list knows: what the next start must count
    final = harness.Run(root, out, 0)
    assert final.finish() == 0, final.stderr[-3000:]
    assert final.lines[-1] == f"done {harness.STEPS}"
    assert committed(directory) == {
        "top": ["checkpoint_45.pt", "checkpoint_48.pt"],
        "last": ["last_checkpoint_45.pt", "last_checkpoint_48.pt"],
    }
    only_committed_files(directory)


@pytest.mark.slow  # 24 s of restarts; CI runs the slow tests
def test_sigkill_cycles_leave_exactly_what_retention_says_on_local_disk(tmp_path, monkeypatch):
    kill_and_restart(str(tmp_path / "run"), tmp_path, cycles=4, seed=5, monkeypatch=monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_many_sigkill_cycles_on_local_disk(tmp_path, monkeypatch, seed):
    kill_and_restart(str(tmp_path / "run"), tmp_path, cycles=8, seed=seed, monkeypatch=monkeypatch)


@pytest.mark.slow  # the local-disk cycles prove the same in the default run; S3 in CI's slow run
def test_sigkill_cycles_leave_exactly_what_retention_says_on_s3(tmp_path, s3_bucket, monkeypatch):
    kill_and_restart(f"{s3_bucket}/runs/exp", tmp_path, cycles=3, seed=7, monkeypatch=monkeypatch)
