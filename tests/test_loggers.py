"""The core of tracking: the bridge feeds every logger the published values at the global step and ends its run
with the right status; the CSV logger writes them; the delivery queue never blocks and never drops.

Nothing here asserts a duration with a tight margin: "never blocks" is shown by ordering (every call returned while
the tracker was still held in a send, or a sender child still held in its start), and the few wall-clock bounds are
liveness bounds, far above what the behaviour takes and below what its breakage would (a wait that never ends)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests._file_tracker import FileTracker
from tests._waiting import eventually
from tracktrain.loggers import CSVLogger, QueuedLogger
from tracktrain.loggers.delivery import DeliveryQueue, Record, read_spill

ROOT = Path(__file__).resolve().parents[1]


def trainer_and_task():
    """The Trainer and the test task, imported by the tests that train: a sender child imports this module for
    FileTracker (delivery="process") and need not import torch."""
    from tracktrain import Trainer

    from .trainer._tasks import Classifier, make_loader

    return Trainer, Classifier, make_loader


def csv_values(run_dir, name: str) -> dict[int, float]:
    """{step: value} of metric `name` in a run's metrics.csv (Lightning's layout: a row per logged step, a column
    per metric, empty where a row does not log it)."""
    rows = csv.DictReader(open(run_dir / "metrics.csv"))
    return {int(row["step"]): float(row[name]) for row in rows if row.get(name) not in (None, "")}


def test_csv_logger_is_the_default_and_holds_every_published_value(tmp_path, without_tensorboard):
    Trainer, Classifier, make_loader = trainer_and_task()
    trainer = Trainer(
        max_epochs=2,
        enable_progress_bar=False,
        enable_checkpointing=False,
        default_root_dir=tmp_path,
        log_every_n_steps=4,
    )
    trainer.fit(Classifier(), make_loader(), make_loader())
    run_dir = tmp_path / "lightning_logs" / "version_0"
    assert trainer.log_dir == trainer.logger.log_dir == str(run_dir)  # Lightning's layout and names
    assert list(csv_values(run_dir, "train_loss")) == [4, 8, 12, 16]
    assert list(csv_values(run_dir, "val_loss")) == [8, 16]
    assert csv_values(run_dir, "val_loss")[16] == pytest.approx(trainer.logged_metrics["val_loss"])
    # every tracker gets the same axes: the step, and the epoch and samples behind it
    samples, epochs = csv_values(run_dir, "samples_seen"), csv_values(run_dir, "epoch")
    assert samples == {4: 32.0, 8: 64.0, 12: 96.0, 16: 128.0} and epochs[4] == 0.0 and epochs[12] == 1.0
    header = next(csv.reader(open(run_dir / "metrics.csv")))
    assert header == sorted(header) and {"step", "epoch", "train_loss", "val_loss"} <= set(header)
    assert "max_epochs: 2" in (run_dir / "hparams.yaml").read_text()
    assert (run_dir / "status.txt").read_text().strip() == "FINISHED"


def test_with_a_remote_root_dir_the_csv_log_is_local_and_checkpoints_are_remote(
    tmp_path, without_tensorboard, monkeypatch
):
    import fsspec

    Trainer, Classifier, make_loader = trainer_and_task()
    monkeypatch.chdir(tmp_path)
    root = f"memory://csv-remote-{os.getpid()}-{time.time_ns()}"
    try:
        trainer = Trainer(max_epochs=1, enable_progress_bar=False, default_root_dir=root, log_every_n_steps=4)
        trainer.fit(Classifier(), make_loader())
        assert list(csv_values(tmp_path / ".tracktrain" / "lightning_logs" / "version_0", "train_loss")) == [4, 8]
        assert os.listdir(tmp_path) == [".tracktrain"]  # no folder named after the URL ("memory:", "s3:")
        assert fsspec.filesystem("memory").exists(f"{root}/checkpoints/checkpoint_8.pt.manifest.json")
    finally:
        fsspec.filesystem("memory").rm(root, recursive=True)


def test_a_failed_fit_marks_the_run_failed(tmp_path):
    Trainer, Classifier, make_loader = trainer_and_task()

    class Broken(Classifier):
        def train_step(self, batch, batch_idx):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        Trainer(max_epochs=1, enable_progress_bar=False, default_root_dir=tmp_path).fit(Broken(), make_loader())
    assert (tmp_path / "lightning_logs" / "version_0" / "status.txt").read_text().strip() == "FAILED"


def test_a_resumed_fit_continues_the_same_run(tmp_path, without_tensorboard):
    from tracktrain.callbacks import ModelCheckpoint

    Trainer, Classifier, make_loader = trainer_and_task()
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt")
    options = dict(enable_progress_bar=False, default_root_dir=tmp_path, log_every_n_steps=8)
    Trainer(max_epochs=1, callbacks=[checkpoint], **options).fit(Classifier(), make_loader())
    Trainer(max_epochs=2, **options).fit(Classifier(), make_loader(), ckpt_path=checkpoint.best_model_path)
    assert os.listdir(tmp_path / "lightning_logs") == ["version_0"]  # one run, continued
    assert list(csv_values(tmp_path / "lightning_logs" / "version_0", "train_loss")) == [8, 16]


SIGTERM_SCRIPT = """
import sys, time
sys.path.insert(0, {root!r})
from tests.trainer._tasks import Classifier, make_loader
from tracktrain import Trainer

class Slow(Classifier):
    def train_step(self, batch, batch_idx):
        if self.global_step == 3:
            print("training", flush=True)
        time.sleep(0.05)
        return super().train_step(batch, batch_idx)

Trainer(max_epochs=100, enable_progress_bar=False, default_root_dir={out!r}).fit(Slow(), make_loader())
"""


def test_sigterm_marks_the_run_killed(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SIGTERM_SCRIPT.format(root=str(ROOT), out=str(tmp_path)))
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "training"
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode != 0
    assert (tmp_path / "lightning_logs" / "version_0" / "status.txt").read_text().strip() == "KILLED"


# ----------------------------------------------------------------------------------------------- delivery queue
class Flaky:
    """A tracker that is down until `up` is set, and records what it receives."""

    def __init__(self) -> None:
        self.up = threading.Event()
        self.received: list[Record] = []

    def send(self, batch: list[Record]) -> None:
        if not self.up.is_set():
            raise ConnectionError("tracker down")
        self.received.extend(batch)


class Tracker:
    """A tracker whose state the test switches: "up" takes every batch (kept in `received`, in order), "down" refuses
    each one (counted in `refused`), "hung" holds every send until the state changes, as a server that stopped
    answering does (`held` is set while a send is held)."""

    def __init__(self, state: str = "up") -> None:
        self._state = state
        self._changed = threading.Condition()
        self.received: list[Record] = []
        self.refused = 0
        self.held = threading.Event()

    def switch(self, state: str) -> None:
        with self._changed:
            self._state = state
            self._changed.notify_all()

    def send(self, batch: list[Record]) -> None:
        with self._changed:
            while self._state == "hung":
                self.held.set()
                self._changed.wait()
            self.held.clear()
            if self._state == "down":
                self.refused += 1
                raise ConnectionError("tracker down")
            self.received.extend(batch)


def as_sent(record: Record) -> tuple:
    return record.kind, record.step, record.payload


@pytest.mark.parametrize("send_then", ["killed", "succeeds", "fails"])
def test_persist_keeps_the_batch_in_flight_ahead_of_newer_spilled_records(tmp_path, send_then):
    """persist() (before a pre-emption) while a send from memory hangs and newer records were already spilled: the
    file then holds everything undelivered, oldest first; a kill loses nothing, and a send that still succeeds or
    fails afterwards delivers each record once, in order."""
    tracker = Tracker("hung")
    spill = tmp_path / "spill.jsonl"
    queue = DeliveryQueue(tracker.send, spill, {"logger": "x"}, max_pending=10, max_backoff=0.2, linger=0.0)
    queue.put(Record("metrics", {"loss": 0.0}, 0))
    assert tracker.held.wait(30)  # step 0 is in flight, from memory
    for step in range(1, 30):  # past max_pending: the oldest waiting ones go to the file, newer than step 0
        queue.put(Record("metrics", {"loss": float(step)}, step))
    assert spill.exists()
    queue.persist()
    _, kept = read_spill(spill)  # what the next attempt of the run reads if this process is killed now
    assert [record.step for record in kept] == list(range(30))
    if send_then == "killed":
        return
    tracker.switch("up" if send_then == "succeeds" else "down")
    if send_then == "fails":
        assert eventually(lambda: tracker.refused >= 1, 30)
        tracker.switch("up")
    assert queue.flush(timeout=60)
    assert [record.step for record in tracker.received] == list(range(30))
    assert queue.close(10) == 0 and not spill.exists()


def test_puts_return_while_the_tracker_hangs_and_every_record_arrives_in_order_when_it_is_back(tmp_path):
    tracker = Tracker("hung")
    spill = tmp_path / "spill.jsonl"
    queue = DeliveryQueue(tracker.send, spill, {"logger": "x"}, max_pending=50, max_backoff=0.2, linger=0.0)
    queue.put(Record("metrics", {"loss": 0.0}, 0))
    assert tracker.held.wait(30)  # the delivery thread is inside a send that does not return

    def train() -> None:
        for step in range(1, 300):
            queue.put(Record("metrics", {"loss": float(step)}, step))

    training = threading.Thread(target=train, daemon=True)
    training.start()
    training.join(60)  # a liveness bound: 299 puts take milliseconds; a put that waited for the tracker never returns
    # ordering, not a stopwatch: every put (spilling to disk included) returned while the tracker still held the send
    assert not training.is_alive() and tracker.held.is_set()
    assert spill.exists()  # past max_pending, the oldest waiting records went to disk
    tracker.switch("down")  # the held send fails, and so do the retries
    assert eventually(lambda: tracker.refused >= 2, 30)
    tracker.switch("up")
    assert queue.flush(timeout=60)
    assert [record.step for record in tracker.received] == list(range(300))  # all, once each, in order
    assert queue.close() == 0 and not spill.exists()


class Logged:
    """Puts records into `queue` and keeps each one, in order: what the tracker must end up with."""

    def __init__(self, queue: DeliveryQueue) -> None:
        self.queue = queue
        self.records: list[Record] = []

    def put(self, kind: str, payload: dict, step: int | None = None) -> None:
        record = Record(kind, payload, step)
        self.queue.put(record)
        self.records.append(record)

    def steps(self, first: int, last: int) -> None:
        for step in range(first, last):
            self.put("metrics", {"loss": 1.0 / (step + 1), "acc": step / 40}, step)


def log_through_an_outage(tracker: Tracker, logged: Logged) -> None:
    """Metrics (two names a step), params and tags before the tracker goes down and while it is down, past two
    refused sends; the tracker is still down when it returns."""
    logged.put("params", {"lr": 0.1, "batch_size": 32})
    logged.put("tags", {"stage": "warmup"})
    logged.steps(0, 10)
    assert logged.queue.flush(30)
    tracker.switch("down")
    logged.steps(10, 20)
    logged.put("params", {"epochs": 4})
    logged.put("tags", {"stage": "train"})
    assert eventually(lambda: tracker.refused >= 1, 30)  # a batch of these was refused: it must be kept
    logged.steps(20, 30)  # more while the tracker is down, behind the refused batch
    assert eventually(lambda: tracker.refused >= 2, 30)
    # records wait: flush does not claim they arrived (and gives up at its timeout: a liveness bound)
    began = time.monotonic()
    assert logged.queue.flush(timeout=0.2) is False and time.monotonic() - began < 30


def test_every_record_logged_across_an_outage_arrives_once_in_order_and_flush_says_so(tmp_path):
    """Counts every record, not a sample: a refused batch that the queue dropped instead of keeping (10 records in a
    one-second outage) shows as missing here, and as `flush()` returning False with `lost` naming the count."""
    tracker = Tracker()
    queue = DeliveryQueue(tracker.send, tmp_path / "spill.jsonl", {"logger": "x"}, max_backoff=0.2, linger=0.05)
    logged = Logged(queue)
    log_through_an_outage(tracker, logged)
    tracker.switch("up")
    logged.steps(30, 40)
    logged.put("tags", {"stage": "done"})
    delivered = queue.flush(timeout=60)
    missing = [as_sent(record) for record in logged.records if record not in tracker.received]
    assert (delivered, queue.lost, missing) == (True, 0, [])
    assert [as_sent(record) for record in tracker.received] == [as_sent(record) for record in logged.records]
    assert queue.close() == 0 and queue.lost == 0


def test_a_tracker_that_never_comes_back_leaves_every_undelivered_record_in_the_spill_file(tmp_path):
    """flush() says False, and close() counts exactly the records that did not arrive: each one is either at the
    tracker or in the spill file, once."""
    tracker = Tracker()
    spill = tmp_path / "spill.jsonl"
    queue = DeliveryQueue(tracker.send, spill, {"logger": "x"}, max_backoff=0.2, linger=0.05)
    logged = Logged(queue)
    log_through_an_outage(tracker, logged)
    assert queue.close(timeout=0.5) == len(logged.records) - len(tracker.received)
    assert queue.lost == 0
    _, kept = read_spill(spill)
    assert [as_sent(record) for record in tracker.received + kept] == [as_sent(record) for record in logged.records]


def test_a_send_that_takes_records_off_its_batch_and_fails_loses_none(tmp_path):
    """A tracker client that pops each record before posting it, and whose connection drops mid-batch: the queue
    retries the whole batch it handed over, not what the send left of it."""
    posted: list[int] = []
    dropped = threading.Event()

    def send(batch: list[Record]) -> None:
        while batch:
            record = batch.pop(0)
            if record.step == 3 and not dropped.is_set():  # the connection drops once, while step 3 goes out
                dropped.set()
                raise ConnectionError("connection reset")
            posted.append(record.step)

    queue = DeliveryQueue(send, tmp_path / "spill.jsonl", {"logger": "x"}, max_backoff=0.1, linger=0.05)
    for step in range(10):
        queue.put(Record("metrics", {"loss": float(step)}, step))
    delivered = queue.flush(timeout=30)
    # the steps posted before the drop are posted again with their batch (trackers keep one copy): each step, first
    # time each, in order
    assert list(dict.fromkeys(posted)) == list(range(10))
    assert delivered and queue.lost == 0 and dropped.is_set()
    assert queue.close() == 0


def test_what_cannot_be_delivered_stays_in_the_spill_file(tmp_path):
    tracker = Flaky()
    queue = DeliveryQueue(tracker.send, tmp_path / "spill.jsonl", {"logger": "x", "run_id": "r1"}, max_backoff=0.1)
    for step in range(20):
        queue.put(Record("metrics", {"loss": float(step)}, step))
    started = time.monotonic()
    assert queue.close(timeout=1.0) == 20
    assert time.monotonic() - started < 30  # a liveness bound: a close that waited for this tracker never returns
    header, records = read_spill(tmp_path / "spill.jsonl")
    assert header == {"logger": "x", "run_id": "r1"} and [r.step for r in records] == list(range(20))


def received(target) -> list[dict]:
    return [json.loads(line) for line in Path(target).read_text().splitlines()] if Path(target).exists() else []


@pytest.mark.parametrize("delivery", ["thread", "process"])
def test_a_run_whose_tracker_stays_down_is_replayed_by_the_documented_command(tmp_path, delivery):
    target = tmp_path / "tracker.jsonl"
    Path(f"{target}.down").touch()
    logger = FileTracker(str(target), close_timeout=0.5, delivery=delivery)
    logger.sender_keep_warm = 0.0  # no child left waiting for a next run
    logger.start(str(tmp_path))
    for step in range(1, 11):
        logger.log_metrics({"loss": 1.0 / step}, step)
    with pytest.warns(UserWarning, match=r"10 records .* python -m tracktrain.loggers.replay"):
        logger.finalize("FINISHED")
    assert not target.exists()
    os.remove(f"{target}.down")
    result = subprocess.run(
        [sys.executable, "-m", "tracktrain.loggers.replay", logger.spill_path],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert [line["step"] for line in received(target)] == list(range(1, 11))
    assert target.with_suffix(".status").read_text() == "FINISHED"  # the replayed run ends as training did
    assert not os.path.exists(logger.spill_path)


def test_loggers_must_be_loggers():
    Trainer, _, _ = trainer_and_task()
    with pytest.raises(TypeError, match=r"Trainer\(loggers=\.\.\.\) takes tracktrain.loggers.Logger instances"):
        Trainer(loggers=["mlflow"])
    with pytest.raises(ValueError, match="two loggers of one kind"):
        Trainer(loggers=[CSVLogger(), CSVLogger()])


def test_loggers_on_a_plain_engine(tmp_path):
    import torch
    from torch import nn

    from tracktrain.engine import create_supervised_trainer
    from tracktrain.loggers import attach_loggers
    from tracktrain.metrics import Average

    _, _, make_loader = trainer_and_task()
    model = nn.Linear(4, 2)
    trainer = create_supervised_trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss())
    Average(output_transform=lambda loss: loss).attach(trainer, "epoch_loss")
    logger = CSVLogger(tmp_path / "logs", name="")
    attach_loggers(
        trainer,
        [logger],
        root_dir=tmp_path,
        output_transform=lambda loss: {"loss": loss},
        every=4,
        hyperparams={"lr": 0.1},
    )
    trainer.run(make_loader(), max_epochs=2)
    assert list(csv_values(tmp_path / "logs" / "version_0", "loss")) == [4, 8, 12, 16]
    assert list(csv_values(tmp_path / "logs" / "version_0", "epoch_loss")) == [8, 16]
    assert (tmp_path / "logs" / "version_0" / "status.txt").read_text().strip() == "FINISHED"


@pytest.mark.parametrize(("error", "status"), [(ValueError("bad batch"), "FAILED"), (KeyboardInterrupt(), "KILLED")])
def test_a_plain_engine_ends_its_runs_as_the_trainer_does(tmp_path, error, status):
    """attach_loggers and the Trainer share one lifecycle (TrackerRuns): an engine that raises ends the run FAILED,
    or KILLED on Ctrl-C, after what was logged before it."""
    from tracktrain.engine import Engine
    from tracktrain.loggers import attach_loggers

    def step(engine, batch):
        if engine.state.iteration == 3:
            raise error
        return {"loss": float(batch)}

    engine = Engine(step)
    logger = CSVLogger(tmp_path, name="logs")
    attach_loggers(engine, [logger], root_dir=tmp_path, output_transform=lambda output: output)
    with pytest.raises(type(error)):
        engine.run([1, 2, 3, 4], max_epochs=1)
    run = tmp_path / "logs" / "version_0"
    assert list(csv_values(run, "loss").values()) == [1.0, 2.0]
    assert (run / "status.txt").read_text().strip() == status


def test_a_value_json_cannot_hold_is_spilled_as_text_not_lost(tmp_path):
    import torch

    tracker = Flaky()
    queue = DeliveryQueue(tracker.send, tmp_path / "spill.jsonl", {"logger": "x"}, max_pending=2, max_backoff=0.1)
    queue.put(Record("params", {"dtype": torch.float32}))
    for step in range(4):
        queue.put(Record("metrics", {"loss": 1.0}, step))
    assert queue.close(timeout=0.5) == 5
    _, records = read_spill(tmp_path / "spill.jsonl")
    assert records[0].payload == {"dtype": "torch.float32"}


def test_every_step_records_travel_in_few_batches(tmp_path):
    batches = []
    queue = DeliveryQueue(batches.append, tmp_path / "spill.jsonl", {"logger": "x"}, linger=0.2)
    for step in range(2000):
        queue.put(Record("metrics", {"a": 1.0, "b": 2.0}, step))
        if step % 100 == 0:
            time.sleep(0.01)  # a training loop: records keep coming
    assert queue.flush(timeout=10) and queue.close() == 0
    assert sum(len(batch) for batch in batches) == 2000
    assert len(batches) < 40  # not one request per step


def test_close_interrupts_a_send_still_running(tmp_path):
    entered, release = threading.Event(), threading.Event()
    events: list[str] = []

    def hanging_send(batch):
        entered.set()
        # a send that nothing but the interrupt ends within the test (its own end comes after 120 s)
        events.append("send interrupted" if release.wait(120) else "send ended on its own")
        raise ConnectionError("interrupted")

    queue = DeliveryQueue(
        hanging_send, tmp_path / "spill.jsonl", {"logger": "x"}, linger=0.0, max_backoff=0.1, interrupt=release.set
    )
    for step in range(3):
        queue.put(Record("metrics", {"loss": 1.0}, step))
    assert entered.wait(30)  # the thread is now inside the hanging send
    assert queue.close(timeout=0.3) == 3
    # ordering, not a stopwatch: by the time close returned it had interrupted the send, which it did not wait out
    assert release.is_set()
    assert eventually(lambda: events, 30) and events == ["send interrupted"]


def test_a_send_still_hanging_at_close_is_kept_in_the_spill_file(tmp_path):
    release = threading.Event()

    def hanging_send(batch):
        release.wait(10)
        raise ConnectionError("timed out")

    entered = threading.Event()
    queue = DeliveryQueue(
        lambda batch: (entered.set(), hanging_send(batch)),
        tmp_path / "spill.jsonl",
        {"logger": "x"},
        linger=0.0,
        max_backoff=0.1,
    )
    for step in range(3):
        queue.put(Record("metrics", {"loss": 1.0}, step))
    assert entered.wait(30)  # the thread is now inside the hanging send
    assert queue.close(timeout=0.5) == 3
    release.set()
    _, records = read_spill(tmp_path / "spill.jsonl")
    assert sorted(r.step for r in records if r.kind == "metrics") == [0, 1, 2]


# ------------------------------------------------------------------------------------- delivery from a child process
def process_state(pid: int) -> str | None:
    """The state letter of process `pid` ("Z": exited, not reaped yet), None once it is gone altogether."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states in /proc")


@needs_proc
def test_a_child_process_sends_every_record_in_order_and_is_reaped_at_the_end(tmp_path):
    target = tmp_path / "tracker.jsonl"
    gate = Path(f"{target}.gate")
    gate.touch()  # the child is held in its start until this goes
    logger = FileTracker(str(target), delivery="process", linger=0.01)
    logger.sender_keep_warm = 0.0  # ended at finalize, not kept for a next run
    logger.start(str(tmp_path))

    def train(steps) -> None:
        for step in steps:
            logger.log_metrics({"loss": float(step)}, step)
            if step % 50 == 0:
                time.sleep(0.02)  # a training loop: records keep coming (while batches go out, once they can)

    training = threading.Thread(target=train, args=(range(300),), daemon=True)
    training.start()
    training.join(60)  # a liveness bound: a call that waited for the child's start would wait for the gate, forever
    # ordering, not a stopwatch: every call returned while the child was held in its start, before any delivery
    assert not training.is_alive() and not target.exists()
    gate.unlink()
    train(range(300, 600))
    assert logger.flush(60)
    child = logger.sender_pid
    logger.finalize("FINISHED")

    lines = received(target)
    assert [line["step"] for line in lines] == list(range(600))  # all, once each, in order
    assert {line["pid"] for line in lines} == {child} and child != os.getpid()
    assert target.with_suffix(".status").read_text() == "FINISHED" and logger.undelivered == 0
    assert process_state(child) is None  # ended and reaped by its PID: not even a zombie is left


@needs_proc
def test_a_child_killed_mid_run_is_replaced_and_every_record_arrives(tmp_path):
    target = tmp_path / "tracker.jsonl"
    logger = FileTracker(str(target), delivery="process", linger=0.01)
    logger.sender_keep_warm = 0.0
    logger.start(str(tmp_path))
    for step in range(100):
        logger.log_metrics({"loss": float(step)}, step)
    assert logger.flush(60)
    first = logger.sender_pid
    os.kill(first, signal.SIGKILL)
    for step in range(100, 200):
        logger.log_metrics({"loss": float(step)}, step)
        time.sleep(0.001)
    assert logger.flush(60)
    second = logger.sender_pid
    logger.finalize("FINISHED")

    assert second not in (None, first) and process_state(first) is None  # the dead one was reaped
    lines = received(target)
    # a batch the dead child had in hand is sent again, whole: what arrives, first time each, is every record in order
    assert list(dict.fromkeys(line["step"] for line in lines)) == list(range(200))
    assert {line["pid"] for line in lines if line["step"] >= 100} == {second}


@needs_proc
def test_a_frozen_child_is_killed_and_replaced(tmp_path):
    target = tmp_path / "tracker.jsonl"
    logger = FileTracker(str(target), delivery="process", linger=0.01)
    logger.sender_keep_warm = 0.0
    logger.sender_silence_timeout = 1.5  # no heartbeat for that long: frozen
    logger.start(str(tmp_path))
    logger.log_metrics({"loss": 0.0}, 0)
    assert logger.flush(60)
    frozen = logger.sender_pid
    os.kill(frozen, signal.SIGSTOP)
    try:
        for step in range(1, 50):
            logger.log_metrics({"loss": float(step)}, step)
        assert logger.flush(60)
    finally:
        if process_state(frozen) is not None:
            os.kill(frozen, signal.SIGKILL)
    replacement = logger.sender_pid
    logger.finalize("FINISHED")
    assert replacement != frozen and process_state(frozen) is None
    assert list(dict.fromkeys(line["step"] for line in received(target))) == list(range(50))


@needs_proc
def test_a_child_left_warm_serves_the_next_run_then_ends(tmp_path):
    first = FileTracker(str(tmp_path / "first.jsonl"), delivery="process", linger=0.01)
    first.sender_keep_warm = 1.0
    first.start(str(tmp_path))
    first.log_metrics({"loss": 1.0}, 1)
    first.finalize("FINISHED")
    (child,) = {line["pid"] for line in received(tmp_path / "first.jsonl")}
    assert process_state(child) not in (None, "Z")  # waiting for the next run

    second = FileTracker(str(tmp_path / "second.jsonl"), delivery="process", linger=0.01)
    second.sender_keep_warm = 1.0
    second.start(str(tmp_path))
    second.log_metrics({"loss": 2.0}, 2)
    assert second.flush(60) and second.sender_pid == child  # no new start: the warm child rebuilt the logger
    second.finalize("FINISHED")
    assert [line["step"] for line in received(tmp_path / "second.jsonl")] == [2]
    assert eventually(lambda: process_state(child) is None, 10)  # nobody came: ended and reaped


SENDER_SCRIPT = """
import sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from tests._file_tracker import FileTracker

target = {target!r}
logger = FileTracker(target, delivery="process", linger=0.01)
logger.start({out!r})
logger.log_metrics({{"loss": 1.0}}, 1)
assert logger.flush(120)
if {busy!r}:  # the child is in the middle of a send that takes 3 s
    Path(target + ".slow").write_text("3")
    logger.log_metrics({{"loss": 2.0}}, 2)
    while not Path(target + ".sending").exists():
        time.sleep(0.01)
print(logger.sender_pid, flush=True)
time.sleep(600)
"""


@needs_proc
@pytest.mark.parametrize("busy", [False, True], ids=["idle", "busy"])
def test_the_child_exits_when_the_training_process_is_killed(tmp_path, busy):
    script = tmp_path / "train.py"
    script.write_text(
        SENDER_SCRIPT.format(root=str(ROOT), target=str(tmp_path / "tracker.jsonl"), out=str(tmp_path), busy=busy)
    )
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        child = int(process.stdout.readline())
        assert process_state(child) not in (None, "Z")
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        # idle: its input closes; busy: its next heartbeat (every second) finds nobody listening, and it exits once
        # the batch in hand is delivered (nobody else has those records any more)
        assert eventually(lambda: process_state(child) in (None, "Z"), 15)
        assert [line["step"] for line in received(tmp_path / "tracker.jsonl")] == ([1, 2] if busy else [1])
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()


@needs_proc
def test_the_end_of_a_run_stops_a_child_stuck_in_a_send_and_keeps_its_batch(tmp_path):
    target = tmp_path / "tracker.jsonl"
    Path(f"{target}.slow").write_text("60")
    logger = FileTracker(str(target), delivery="process", linger=0.0, close_timeout=0.5)
    logger.start(str(tmp_path))
    for step in range(3):
        logger.log_metrics({"loss": float(step)}, step)
    assert eventually(lambda: Path(f"{target}.sending").exists(), 60)
    child = logger.sender_pid
    with pytest.warns(UserWarning, match=r"3 records for file run run-1 could not be delivered"):
        logger.finalize("FAILED")
    # ordering, not a stopwatch: when finalize returned, the child had been stopped and reaped in the middle of its
    # 60 s send (which would have written the records): the end of the run did not wait it out
    assert process_state(child) is None and not target.exists()
    _, records = read_spill(logger.spill_path)
    assert [record.step for record in records if record.kind == "metrics"] == [0, 1, 2]


def test_process_delivery_needs_a_logger_a_child_can_rebuild():
    class Local(FileTracker):
        pass

    Local.__module__ = "__main__"
    with pytest.raises(ValueError, match=r"Local\(delivery='process'\) .* defined in __main__.*delivery='thread'"):
        Local("x", delivery="process")

    class NoReplay(QueuedLogger):
        _open = _send = _close = None

    with pytest.raises(ValueError, match=r"NoReplay.for_sender\(header\) \(by default for_replay\): implement one"):
        NoReplay(delivery="process")
    with pytest.raises(ValueError, match=r"delivery=\.\.\.\) must be one of \('thread', 'process'\), got 'fork'"):
        FileTracker("x", delivery="fork")


CHILD_RUN = """
import sys
from tests._file_tracker import FileTracker
logger = FileTracker(sys.argv[1], delivery="process", linger=0.01)
logger.sender_keep_warm = 0.0
logger.start(sys.argv[2])
for step in range(20):
    logger.log_metrics({"loss": float(step)}, step)
assert logger.flush(60)
logger.finalize("FINISHED")
print("sent", flush=True)
"""


def test_the_sender_child_and_its_parent_exit_without_resource_warnings(tmp_path):
    target = tmp_path / "tracker.jsonl"
    result = subprocess.run(
        [sys.executable, "-X", "dev", "-c", CHILD_RUN, str(target), str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "always::ResourceWarning"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and result.stdout.strip() == "sent", result.stderr[-3000:]
    assert len(received(target)) == 20
    assert "ResourceWarning" not in result.stderr, result.stderr[-3000:]  # the child writes to the same stderr
