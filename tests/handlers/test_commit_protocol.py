"""The checkpoint commit protocol, at every write boundary of a real save.

A checkpoint is committed by its manifest, written after its data file: so a crash anywhere must leave every
checkpoint either without a manifest (never chosen) or with one, and then loading completely and exactly as saved;
and a power loss must not keep a manifest whose data file it lost, so the data file and the rename that named it
are on disk (fsync of the file, then of the directory) before the manifest is, and the manifest before the save
counts as done. Two kinds of test:

- kills: `_commit_kill_script.py` saves in child processes and SIGKILLs each at one boundary (before each open,
  write, fsync, rename and delete in the checkpoint directory, and in the middle of each write); what is left is then
  read with the code a resume uses (`resume_candidates`, `load_newest`, `Checkpoint.load_objects`, the start-of-run
  sweep `remove_uncommitted`). A kill keeps what was written before it (the page cache survives), so these prove the
  order of the commit, not its durability;
- an fsync spy: every fsync in the checkpoint directory (the fd's path read from /proc) in order with the renames and
  deletions, for a saver and for a Trainer's `ModelCheckpoint`, checked against that order.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from tracktrain import storage
from tracktrain.checkpoint.discovery import committed_checkpoints, resume_candidates
from tracktrain.checkpoint.manifest import MANIFEST_SUFFIX, remove_uncommitted
from tracktrain.checkpoint.resume import load_newest
from tracktrain.checkpoint.savers import CheckpointWriteError
from tracktrain.handlers import Checkpoint, DiskSaver

from ._commit_kill_script import objects_at, summarize

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SCRIPT = HERE / "_commit_kill_script.py"
LOCAL_SCENARIOS = ("async", "overwrite")  # the first: what ModelCheckpoint writes with; the second: synchronous
STEP_1_FILE = {"async": "checkpoint_1.pt", "overwrite": "checkpoint.pt", "s3": "checkpoint_1.pt"}


# --------------------------------------------------------------------------------------------- kills, checked
def kill_at_every_boundary(scenarios: str, root: str, work: Path) -> dict[str, Any]:
    report = work / "report.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), scenarios, root, str(report)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    results = json.loads(report.read_text())
    for scenario in results.values():
        scenario["stderr"] = result.stderr
    return results


@pytest.fixture(scope="module")
def local_kills(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One script run for every local scenario: it imports torch once, then forks a child per boundary."""
    work = tmp_path_factory.mktemp("commit-kills")
    return kill_at_every_boundary(",".join(LOCAL_SCENARIOS), str(work / "store"), work)


def same_state(loaded: dict[str, Any], step: int) -> bool:
    expected = objects_at(step)
    model, reference = loaded["model"].state_dict(), expected["model"].state_dict()
    return (
        model.keys() == reference.keys()
        and all(torch.equal(model[key], reference[key]) for key in model)
        and loaded["blob"].step == step
        and torch.equal(loaded["blob"].data, expected["blob"].data)
    )


def newest_loaded_step(directory: str, where: str) -> int | None:
    """The step of the checkpoint that `Trainer(resume="auto")` would load from `directory` (None: a fresh start),
    loaded and checked as it would be."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a checkpoint skipped as incomplete or corrupted is a failure here
        candidates = resume_candidates([directory])
        objects = objects_at(0)
        url = load_newest(candidates, lambda url: Checkpoint.load_objects(objects, url))
    if url is None:
        return None
    step = next(candidate for candidate in candidates if candidate.url == url).summary["global_step"]
    assert same_state(objects, step), f"{where}: resume loaded {url}, which is not the state saved at step {step}"
    return step


def commit_point(labels: list[str]) -> int:
    """The boundary at which step 2 becomes committed: the manifest's rename (local) or its put (S3). A kill at it
    or before leaves step 2 uncommitted; a kill after it, committed."""
    manifests = [
        k for k, label in enumerate(labels) if label.endswith(MANIFEST_SUFFIX) and label.startswith(("rename ", "put "))
    ]
    assert len(manifests) == 1, f"one manifest commit expected in the save's boundaries, got {labels}"
    return manifests[0]


def first_change_to(name: str, labels: list[str]) -> int:
    """The first boundary that deletes the committed checkpoint `name` or its manifest, or renames onto them."""
    touching = [
        k
        for k, label in enumerate(labels)
        if label.startswith(("remove ", "rename ", "put ")) and label.split()[-1] in (name, name + MANIFEST_SUFFIX)
    ]
    return touching[0] if touching else len(labels)


def check_what_a_kill_left(scenario: str, outcome: dict[str, Any], labels: list[str], stderr: str) -> None:
    k, directory = outcome["k"], outcome["directory"]
    where = f"{scenario} save SIGKILLed at boundary {k} ({outcome['label']!r}; boundaries: {labels})"
    assert outcome["signal"] == signal.SIGKILL, f"{where}: the child ended otherwise ({outcome}): {stderr}"

    names = storage.listdir(directory)
    manifested = {name[: -len(MANIFEST_SUFFIX)] for name in names if name.endswith(MANIFEST_SUFFIX)}
    committed, problems = committed_checkpoints(directory)
    # a manifest on disk is a commit: its checkpoint is complete, whatever moment the kill came at
    assert problems == [], f"{where}: a manifest was committed before what it lists: {problems}"
    assert {checkpoint.data_filename for checkpoint in committed} == manifested, where
    for checkpoint in committed:
        objects = objects_at(0)
        Checkpoint.load_objects(objects, checkpoint.url)  # reads and checks it against its manifest (SHA-256)
        step = checkpoint.summary["global_step"]
        assert same_state(objects, step), f"{where}: {checkpoint.url} loads, but not as saved at step {step}"

    newest = newest_loaded_step(directory, where)
    if k > commit_point(labels):
        assert newest == 2, f"{where}: step 2 was committed, but a resume loads {newest}"
    elif k <= first_change_to(STEP_1_FILE[scenario], labels):
        # step 1 stays committed until the save must replace it (same name) or retention deletes it (after step 2)
        assert newest == 1, f"{where}: step 2 was not committed, and a resume loads {newest}, not step 1"
    else:  # between the uncommit of step 1 and the commit of step 2 under the same name: nothing to resume
        assert scenario == "overwrite" and newest is None, f"{where}: a resume loads {newest}"

    # the sweep at the start of the next run deletes exactly what is not committed, and nothing that is
    owned = {name for name in names if not name.endswith(MANIFEST_SUFFIX) and not name.startswith(".")}
    removed = remove_uncommitted(directory, owned=lambda name: name in owned)
    kept = set(manifested) | {name + MANIFEST_SUFFIX for name in manifested}
    assert sorted(removed) == sorted(set(names) - kept), where
    assert set(storage.listdir(directory)) == kept, where
    assert [checkpoint.data_filename for checkpoint in committed_checkpoints(directory)[0]] == [
        checkpoint.data_filename for checkpoint in committed
    ], where


@pytest.mark.parametrize("scenario", LOCAL_SCENARIOS)
def test_a_kill_at_any_write_boundary_leaves_no_manifest_without_its_whole_checkpoint(local_kills, scenario):
    """Local disk: at every boundary of a save (through an AsyncSaver, as ModelCheckpoint saves; and synchronously
    under the name of the checkpoint it replaces), a checkpoint with a manifest loads completely and equals what was
    saved at its step; one without is never chosen; resume picks step 2 exactly when its manifest was renamed into
    place; the sweep deletes only what has no manifest."""
    result = local_kills[scenario]
    labels = result["labels"]
    # the boundaries are the protocol's operations: a kill test that saw none would prove nothing
    assert {"open", "write", "mid-write", "fsync", "rename"} <= {label.split()[0] for label in labels}, labels
    assert len(result["outcomes"]) == len(labels) >= 12
    if scenario == "overwrite":  # the checkpoint replaced stays committed while the new data is written
        assert labels.index("fsync tmp(checkpoint.pt)") < first_change_to("checkpoint.pt", labels), labels
    for outcome in result["outcomes"]:
        check_what_a_kill_left(scenario, outcome, labels, result["stderr"])


@pytest.mark.slow  # 6-9 s: every child opens its own s3fs session
def test_a_kill_at_any_request_to_s3_leaves_no_manifest_without_its_whole_checkpoint(s3_bucket, tmp_path):
    """The same on S3 (moto's server, reached by s3fs as users reach S3): a kill before each put and delete."""
    result = kill_at_every_boundary("s3", f"{s3_bucket}/checkpoints", tmp_path)["s3"]
    labels = result["labels"]
    puts = [label for label in labels if label.startswith("put ")]
    assert puts == ["put checkpoint_2.pt", "put checkpoint_2.pt" + MANIFEST_SUFFIX], labels
    for outcome in result["outcomes"]:
        check_what_a_kill_left("s3", outcome, labels, result["stderr"])


def test_a_failed_save_under_a_committed_checkpoints_name_leaves_that_checkpoint_whole(tmp_path, monkeypatch):
    """A save that fails (ENOSPC from the data file's fsync, as a full disk, a quota or a thin volume reports it)
    under the name of a committed checkpoint (a fixed `filename_pattern`, or a re-save at the same step) leaves
    that checkpoint as it was: committed, and what a resume loads."""
    directory = tmp_path / "checkpoints"
    saver = DiskSaver(directory, manifest=True, summarize=summarize)
    saver({name: obj.state_dict() for name, obj in objects_at(1).items()}, "checkpoint.pt")
    real_fsync = os.fsync

    def full(fd: int) -> None:
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).startswith(".checkpoint.pt."):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(CheckpointWriteError, match="No space left on device"):
        saver({name: obj.state_dict() for name, obj in objects_at(2).items()}, "checkpoint.pt")
    monkeypatch.undo()
    assert sorted(os.listdir(directory)) == ["checkpoint.pt", "checkpoint.pt" + MANIFEST_SUFFIX]
    assert committed_checkpoints(directory)[1] == []
    assert newest_loaded_step(str(directory), "after the failed save") == 1


# ----------------------------------------------------------------------------------------------- the fsync spy
@dataclass
class Operation:
    kind: str  # "fsync", "rename" or "remove"
    name: str  # the file's name in the directory ("." for the directory itself), the rename's target
    inode: int
    size: int
    thread: int


class CommitSpy:
    """Records, in order, the fsyncs, renames and deletions in `directory` (each fsync'd fd's path read from
    /proc/self/fd, with its inode and size once fsync returned), and lets each happen."""

    def __init__(self, directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.directory = os.path.realpath(directory)
        self.operations: list[Operation] = []
        real_fsync, real_replace, real_rename, real_remove = os.fsync, os.replace, os.rename, os.remove

        def fsync(fd: int) -> None:
            real_fsync(fd)
            name = self._name(os.readlink(f"/proc/self/fd/{fd}"))
            if name is not None:
                status = os.fstat(fd)
                self._add("fsync", name, status.st_ino, status.st_size)

        def renamer(real):
            def rename(source, target, *args, **kwargs):
                name = self._name(target)
                status = os.stat(source) if name is not None else None
                real(source, target, *args, **kwargs)
                if status is not None:
                    self._add("rename", name, status.st_ino, status.st_size)

            return rename

        def remove(path, *args, **kwargs):
            real_remove(path, *args, **kwargs)
            name = self._name(path)
            if name is not None:
                self._add("remove", name, 0, 0)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", renamer(real_replace))
        monkeypatch.setattr(os, "rename", renamer(real_rename))
        monkeypatch.setattr(os, "remove", remove)

    def _name(self, path: str | os.PathLike) -> str | None:
        path = os.path.realpath(path)
        if path == self.directory:
            return "."
        return os.path.basename(path) if os.path.dirname(path) == self.directory else None

    def _add(self, kind: str, name: str, inode: int, size: int) -> None:
        self.operations.append(Operation(kind, name, inode, size, threading.get_ident()))

    def check_commit(self, data_name: str) -> None:
        """The order that makes the commit of `data_name` survive a power loss: the data file fsynced whole, renamed
        into place, the directory fsynced (the rename is on disk); then the manifest the same way, the directory
        fsynced after its rename, all in the thread that saves and before it goes on to anything else here."""
        renames = [op for op in self.operations if op.kind == "rename" and op.name == data_name]
        assert len(renames) == 1, f"{data_name} was renamed into place {len(renames)} times: {self.operations}"
        data = renames[0]
        ops = [op for op in self.operations if op.thread == data.thread]
        story = "\n".join(f"  {op.kind} {op.name} ({op.size} bytes)" for op in ops)
        at = ops.index(data)
        manifest_name = data_name + MANIFEST_SUFFIX
        committed = [i for i, op in enumerate(ops) if op.kind == "rename" and op.name == manifest_name]
        assert len(committed) == 1 and committed[0] > at, f"the manifest is renamed into place after the data:\n{story}"
        commit = committed[0]
        manifest = ops[commit]
        after = next((i for i in range(commit + 1, len(ops)) if ops[i].kind != "fsync"), len(ops))

        def fsynced(op: Operation, start: int, end: int) -> bool:
            return any(o.kind == "fsync" and o.inode == op.inode and o.size == op.size for o in ops[start:end])

        def directory_fsynced(start: int, end: int) -> bool:
            return any(o.kind == "fsync" and o.name == "." for o in ops[start:end])

        assert fsynced(data, 0, at), f"{data_name} was not fsynced, whole, before it was renamed into place:\n{story}"
        assert directory_fsynced(at + 1, commit), (
            f"the directory was not fsynced between the rename of {data_name} and the manifest's: a power loss could "
            f"keep the manifest and lose the data file's name:\n{story}"
        )
        assert fsynced(manifest, at + 1, commit), (
            f"{manifest_name} was not written and fsynced, whole, after {data_name} was in place and before its own "
            f"rename:\n{story}"
        )
        assert directory_fsynced(commit + 1, after), (
            f"the directory was not fsynced after the manifest's rename, before the saver went on (retention may "
            f"delete the checkpoint before it, which a power loss could then leave as the only one, uncommitted):"
            f"\n{story}"
        )


def test_a_saver_fsyncs_the_data_and_its_directory_before_the_manifest_and_the_manifest_after(tmp_path, monkeypatch):
    directory = tmp_path / "checkpoints"
    saver = DiskSaver(directory, manifest=True, summarize=summarize)
    spy = CommitSpy(directory, monkeypatch)
    for step in (1, 2):
        saver({name: obj.state_dict() for name, obj in objects_at(step).items()}, f"checkpoint_{step}.pt")
    saver.remove("checkpoint_1.pt")
    for step in (1, 2):
        spy.check_commit(f"checkpoint_{step}.pt")
    assert [op.name for op in spy.operations if op.kind == "remove"] == [
        "checkpoint_1.pt" + MANIFEST_SUFFIX,
        "checkpoint_1.pt",
    ]  # uncommitted first, then its data deleted


def test_the_trainers_checkpoints_are_fsynced_in_commit_order(tmp_path, monkeypatch):
    """The Trainer's default ModelCheckpoint (async_save: the writes happen in a background thread) commits each
    checkpoint in the same durable order."""
    from tests.trainer._tasks import Classifier, make_loader
    from tracktrain import Trainer
    from tracktrain.callbacks import ModelCheckpoint

    directory = tmp_path / "checkpoints"
    directory.mkdir()
    spy = CommitSpy(directory, monkeypatch)
    callback = ModelCheckpoint(dirpath=directory, every_n_train_steps=1, save_top_k=1)
    assert callback.async_save
    trainer = Trainer(
        enable_progress_bar=False, default_root_dir=tmp_path, max_steps=2, callbacks=[callback], loggers=False
    )
    trainer.fit(Classifier(), make_loader(n=16))
    for name in ("checkpoint_1.pt", "checkpoint_2.pt"):
        spy.check_commit(name)
    saving_threads = {op.thread for op in spy.operations if op.kind == "rename" and op.name.endswith(".pt")}
    assert threading.get_ident() not in saving_threads  # the background writer did commit them
    assert [checkpoint.data_filename for checkpoint in committed_checkpoints(directory)[0]] == ["checkpoint_2.pt"]
