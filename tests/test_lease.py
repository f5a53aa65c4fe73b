"""One writer per checkpoint directory (tracktrain/checkpoint/lease.py): real training processes on one root, on local disk and
on S3 (moto's server through s3fs), with `tests/trainer/_resume_script.py` (`Trainer(resume="auto")`); then the
heartbeat, a store that fails under it, a lease lost to another holder, and a race, in this process."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time
import warnings

import pytest

from tests.trainer._resume_run import STEPS, Run
from tests.trainer._tasks import Classifier, make_loader
from tracktrain import Callback, Trainer, storage
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.checkpoint import lease
from tracktrain.checkpoint.discovery import committed_checkpoints
from tracktrain.checkpoint.manifest import read_checked


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.slow)])  # s3: moto, in the slow run
def root(request, tmp_path) -> str:
    if request.param == "local":
        return str(tmp_path / "run")
    return f"{request.getfixturevalue('s3_bucket')}/runs/exp"


@pytest.fixture
def start(root):
    """`start(out)`: a `Run` of the script on `root`; whatever is still running at the end is killed (before the
    bucket of an S3 root is deleted)."""
    runs: list[Run] = []

    def start(out) -> Run:
        runs.append(Run(root, out, 0))
        return runs[-1]

    yield start
    for run in runs:
        if run.process.returncode is None:
            run.kill()
            run.finish()


def checkpoint_dir(root: str) -> str:
    return storage.join(root, "checkpoints")


def lease_url(root: str) -> str:
    return storage.join(checkpoint_dir(root), lease.LEASE_NAME)


def read_lease(root: str) -> lease.LeaseRecord:
    return lease.LeaseRecord.parse(storage.read_bytes(lease_url(root)))


def listing(directory: str) -> dict[str, tuple]:
    """Name -> what changes when a file is written (size, and mtime or ETag), for the files in `directory`."""
    fs, path = storage.open_filesystem(directory)
    fs.invalidate_cache(path)
    return {
        entry["name"].rsplit("/", 1)[-1]: tuple(
            entry.get(key) for key in ("size", "mtime", "ino", "ETag", "LastModified")
        )
        for entry in fs.ls(path, detail=True)
    }


def wait_until_stopped(pid: int, timeout: float = 60.0) -> None:
    """Until every thread of `pid` is stopped: SIGSTOP takes effect when a thread leaves the kernel, and a writer
    thread inside a write() or an fsync() on a loaded machine can go on changing files for a while after the signal."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = []
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                with open(f"/proc/{pid}/task/{task}/stat") as stat:
                    states.append(stat.read().rsplit(")", 1)[1].split()[0])
        if states and all(state in ("T", "t") for state in states):
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} did not stop within {timeout} s")


def another_host(heartbeat_age: float) -> lease.LeaseRecord:
    """A lease of a process on another machine, whose last heartbeat is `heartbeat_age` seconds old."""
    now = time.time()
    return lease.LeaseRecord(
        holder="f" * 32,
        host="gpu-node-7.invalid",
        pid=4242,
        boot_id="another-boot",
        pid_namespace=None,
        started=now - heartbeat_age - 600,
        heartbeat=now - heartbeat_age,
        stale_after=120.0,
    )


def assert_finished_with_intact_checkpoints(run: Run, root: str) -> None:
    assert run.finish() == 0, run.stderr[-3000:]
    assert run.lines[-1] == f"done {STEPS}"
    committed, problems = committed_checkpoints(checkpoint_dir(root))
    assert problems == []
    assert sorted(c.data_filename for c in committed) == [  # save_top_k=2, save_last=2 of a save every 3 steps
        "checkpoint_45.pt",
        "checkpoint_48.pt",
        "last_checkpoint_45.pt",
        "last_checkpoint_48.pt",
    ]
    for checkpoint in committed:
        _, check, _ = read_checked(checkpoint.url)
        check()  # every byte as its manifest says
    assert not storage.exists(lease_url(root))  # released at the end of fit


def test_a_second_run_on_a_live_root_fails_fast_and_the_first_finishes_unharmed(root, start, tmp_path):
    first = start(tmp_path / "first.pt")
    assert first.read_until(lambda line: line == "step 4") == "step 4"
    os.kill(first.process.pid, signal.SIGSTOP)  # alive, but holds still: nothing it does changes the directory
    try:
        wait_until_stopped(first.process.pid)
        assert read_lease(root).pid == first.process.pid
        # what a save under way looks like: a start that swept the directory would delete it
        in_flight = storage.join(checkpoint_dir(root), ".checkpoint_6.pt.0123456789ab.tmp")
        storage.write_bytes(in_flight, b"half a checkpoint")
        before = listing(checkpoint_dir(root))
        second = start(tmp_path / "second.pt")
        code = second.finish(timeout=60)  # fast: it does not wait for the first's lease to go stale (120 s)
        after = listing(checkpoint_dir(root))
    finally:
        os.kill(first.process.pid, signal.SIGCONT)
    assert code != 0
    assert "LeaseHeld: Another run is writing checkpoints to" in second.stderr, second.stderr[-3000:]
    assert f"pid {first.process.pid} on host" in second.stderr
    assert "Stop that run or wait for it to end, or give this run another directory" in second.stderr
    assert not [line for line in second.lines if line.startswith(("step ", "saving "))]
    assert after == before  # it wrote, replaced and deleted nothing in the first's directory
    assert_finished_with_intact_checkpoints(first, root)
    assert "LeaseWarning" not in first.stderr


def test_a_run_killed_with_sigkill_is_taken_over_at_once_and_resumed(tmp_path):
    root = str(tmp_path / "run")
    first = Run(root, tmp_path / "out.pt", 0)
    first.read_until(lambda line: line == "step 8")
    deadline = time.monotonic() + 30
    while not committed_checkpoints(checkpoint_dir(root))[0]:  # something to resume from
        assert time.monotonic() < deadline, "no checkpoint was committed"
        time.sleep(0.05)
    first.process.send_signal(signal.SIGKILL)
    first.finish()
    left = read_lease(root)  # a SIGKILLed run cannot release its lease
    assert left.pid == first.process.pid
    assert time.time() - left.heartbeat < left.stale_after  # fresh: only the dead pid lets the next run take it over

    again = Run(root, tmp_path / "out.pt", 0)
    assert again.finish() == 0, again.stderr[-3000:]
    assert again.resumed_from()[1] > 0
    assert f"Took over the checkpoint lease {lease_url(root)} from pid {first.process.pid} on host" in again.stderr
    assert f"process {first.process.pid} is no longer running on this host" in again.stderr
    assert again.lines[-1] == f"done {STEPS}"
    assert not storage.exists(lease_url(root))


def test_a_stale_lease_of_another_host_is_taken_over_with_a_warning(root, start, tmp_path):
    storage.makedirs(checkpoint_dir(root))
    storage.write_bytes_atomic(lease_url(root), another_host(heartbeat_age=1000).to_bytes())
    run = start(tmp_path / "out.pt")
    assert run.finish() == 0, run.stderr[-3000:]
    assert "LeaseWarning: Took over the checkpoint lease" in run.stderr
    assert "from pid 4242 on host gpu-node-7.invalid" in run.stderr
    assert "its last heartbeat is more than 120 s old" in run.stderr
    assert run.lines[-1] == f"done {STEPS}"
    assert not storage.exists(lease_url(root))


def test_a_fresh_lease_of_another_host_is_refused(root, start, tmp_path):
    storage.makedirs(checkpoint_dir(root))
    held = another_host(heartbeat_age=5).to_bytes()
    storage.write_bytes_atomic(lease_url(root), held)
    run = start(tmp_path / "out.pt")
    assert run.finish(timeout=60) != 0
    assert "LeaseHeld: Another run is writing checkpoints to" in run.stderr, run.stderr[-3000:]
    assert "pid 4242 on host gpu-node-7.invalid" in run.stderr
    assert "it counts as gone once its heartbeat is more than 120 s old" in run.stderr
    # an expected refusal ends the script with its message alone (tracktrain's frames would say nothing more)
    assert "Traceback" not in run.stderr and run.stderr.strip().splitlines()[-1].startswith("tracktrain.checkpoint")
    assert storage.read_bytes(lease_url(root)) == held  # neither taken over nor deleted on the way out
    assert list(listing(checkpoint_dir(root))) == [lease.LEASE_NAME]  # and nothing written beside it


# ------------------------------------------------------------------------------------------------ in this process
def wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def lease_warnings(caught, text: str) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, lease.LeaseWarning) and text in str(w.message)]


def test_the_heartbeat_advances_and_a_failing_store_only_warns_once(tmp_path, monkeypatch):
    directory = str(tmp_path)
    user = object()
    lease.acquire(directory, user, heartbeat_interval=0.05)
    try:
        url = storage.join(directory, lease.LEASE_NAME)
        first = lease.LeaseRecord.parse(storage.read_bytes(url))
        assert first.stale_after == 4 * 0.05
        wait_for(lambda: lease.LeaseRecord.parse(storage.read_bytes(url)).heartbeat > first.heartbeat)

        attempts = []
        write = storage.write_bytes_atomic

        def store_down(target, data):
            if target == url:
                attempts.append(time.time())
                raise ConnectionError("the store is down")
            write(target, data)

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            monkeypatch.setattr(storage, "write_bytes_atomic", store_down)
            wait_for(lambda: len(attempts) >= 5)  # it keeps trying
            monkeypatch.setattr(storage, "write_bytes_atomic", write)
            down_since = lease.LeaseRecord.parse(storage.read_bytes(url)).heartbeat
            wait_for(lambda: lease.LeaseRecord.parse(storage.read_bytes(url)).heartbeat > attempts[-1])  # and recovers
        assert down_since < attempts[0]
        assert len(lease_warnings(caught, "Could not refresh the checkpoint lease")) == 1
        assert "ConnectionError: the store is down" in lease_warnings(caught, "Could not refresh")[0]
    finally:
        lease.release(directory, user)
    assert not os.path.exists(url)


class SlowSteps(Callback):
    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        time.sleep(0.02)  # several heartbeats of 0.05 s during the fit


def test_a_store_failing_under_the_heartbeat_does_not_stop_training(tmp_path, monkeypatch):
    monkeypatch.setattr(lease, "HEARTBEAT_INTERVAL", 0.05)
    directory = str(tmp_path / "checkpoints")
    lease_file = storage.join(directory, lease.LEASE_NAME)
    attempts = []
    write = storage.write_bytes_atomic

    def lease_store_down(target, data):
        if target == lease_file:
            attempts.append(target)
            raise PermissionError("access denied")
        write(target, data)

    monkeypatch.setattr(storage, "write_bytes_atomic", lease_store_down)  # checkpoints still get written
    trainer = Trainer(
        max_epochs=4,
        default_root_dir=tmp_path,
        enable_progress_bar=False,
        loggers=False,
        callbacks=[ModelCheckpoint(directory, save_top_k=1), SlowSteps()],
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(Classifier(), make_loader())
    assert trainer.global_step == 32
    assert len(attempts) >= 2
    assert len(lease_warnings(caught, "Could not refresh the checkpoint lease")) == 1
    assert storage.listdir(directory) == ["checkpoint_32.pt", "checkpoint_32.pt.manifest.json"]


def test_a_lease_taken_over_by_another_writer_warns_and_is_left_to_it(tmp_path):
    directory = str(tmp_path)
    url = storage.join(directory, lease.LEASE_NAME)
    user = object()
    held = lease.acquire(directory, user, heartbeat_interval=0.05)
    other = another_host(heartbeat_age=0).to_bytes()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        storage.write_bytes_atomic(url, other)
        wait_for(lambda: held.lost_to is not None)
        lease.release(directory, user)
    [message] = lease_warnings(caught, "ANOTHER WRITER TOOK OVER")
    assert "pid 4242 on host gpu-node-7.invalid" in message
    assert storage.read_bytes(url) == other  # not refreshed over, not deleted

    os.remove(url)
    lease.acquire(directory, user, settle=0.0)  # ... even when no heartbeat has seen the other yet
    storage.write_bytes_atomic(url, other)
    lease.release(directory, user)
    assert storage.read_bytes(url) == other


def test_two_checkpoint_callbacks_on_one_directory_share_the_lease(tmp_path):
    directory = str(tmp_path / "checkpoints")
    seen = []

    class LookAtLease(Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            seen.append(read_lease(str(tmp_path)).holder)

    trainer = Trainer(
        max_epochs=1,
        default_root_dir=tmp_path,
        enable_progress_bar=False,
        loggers=False,
        callbacks=[ModelCheckpoint(directory), ModelCheckpoint(directory, filename_prefix="also"), LookAtLease()],
    )
    trainer.fit(Classifier(), make_loader())
    assert len(set(seen)) == 1 and len(seen) == 8
    assert not os.path.exists(os.path.join(directory, lease.LEASE_NAME))  # the last one out deleted it
    assert "checkpoint_8.pt" in os.listdir(directory) and "also_checkpoint_8.pt" in os.listdir(directory)


def test_the_lease_file_goes_with_the_last_user_of_the_process(tmp_path):
    directory, first, second = str(tmp_path), object(), object()
    held = lease.acquire(directory, first)
    assert lease.acquire(directory, second) is held
    lease.release(directory, object())  # not a user: nothing happens
    lease.release(directory, first)
    assert lease.LeaseRecord.parse((tmp_path / lease.LEASE_NAME).read_bytes()) == held.record
    lease.release(directory, second)
    assert not (tmp_path / lease.LEASE_NAME).exists()


def test_a_fit_that_fails_releases_the_lease(tmp_path):
    failures = [RuntimeError("boom")]

    class Fail(Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            assert os.path.exists(tmp_path / "checkpoints" / lease.LEASE_NAME)
            if failures:
                raise failures.pop()

    trainer = Trainer(
        max_epochs=1, default_root_dir=tmp_path, enable_progress_bar=False, loggers=False, callbacks=[Fail()]
    )
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(Classifier(), make_loader())
    assert not os.path.exists(tmp_path / "checkpoints" / lease.LEASE_NAME)
    trainer.fit(Classifier(), make_loader())  # and the next fit of this process takes it again
    assert trainer.global_step == 8


def test_a_rival_that_writes_during_the_settle_wins_on_an_object_store(s3_bucket):
    """Without an exclusive create, the lease is written, then read back: a rival's write in between wins."""
    directory = f"{s3_bucket}/checkpoints"
    url = storage.join(directory, lease.LEASE_NAME)
    rival = another_host(heartbeat_age=0).to_bytes()

    def overwrite_once_ours_is_there() -> None:
        wait_for(lambda: storage.exists(url))
        storage.write_bytes_atomic(url, rival)

    thread = threading.Thread(target=overwrite_once_ours_is_there)
    thread.start()
    with pytest.raises(lease.LeaseHeld, match="pid 4242 on host gpu-node-7.invalid"):
        lease.acquire(directory, object(), settle=2.0)
    thread.join()
    assert storage.read_bytes(url) == rival


def test_a_damaged_lease_is_replaced_and_a_forgotten_own_lease_retaken(tmp_path):
    directory = str(tmp_path)
    url = storage.join(directory, lease.LEASE_NAME)
    storage.write_bytes_atomic(url, b"")  # a holder killed between creating the file and writing it
    user = object()
    with pytest.warns(lease.LeaseWarning, match="Replaced the damaged checkpoint lease"):
        held = lease.acquire(directory, user, settle=0.0)
    lease.release(directory, user)
    storage.write_bytes_atomic(url, held.record.to_bytes())  # a release of this process that failed to delete
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lease.acquire(directory, user, settle=0.0)
    lease.release(directory, user)
    assert not os.path.exists(url)


@pytest.mark.parametrize("where", ["local", "memory"])
def test_an_exclusive_create_never_replaces_a_file(tmp_path, where):
    url = str(tmp_path / "lease") if where == "local" else f"memory://{tmp_path}/lease"
    assert storage.create_exclusive(url, b"first") is True
    assert storage.create_exclusive(url, b"second") is False
    assert storage.read_bytes(url) == b"first"


def test_lease_records_are_checked_field_by_field():
    record = another_host(heartbeat_age=0)
    assert lease.LeaseRecord.parse(record.to_bytes()) == record
    for field, value in [
        ("pid", 0),
        ("pid", -1),
        ("pid", True),
        ("holder", ""),
        ("stale_after", 0),
        ("heartbeat", float("nan")),
        ("host", None),
    ]:
        with pytest.raises(ValueError, match=field):
            lease.LeaseRecord.parse(dataclasses.replace(record, **{field: value}).to_bytes())
    with pytest.raises(ValueError, match="not JSON"):
        lease.LeaseRecord.parse(b'{"format": ')
