"""The core of tracking: the bridge feeds every logger the published values at the global step and ends its run
with the right status; the CSV logger writes them; the delivery queue never blocks and never drops."""

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

from tracktrain import Trainer
from tracktrain.loggers import CSVLogger, QueuedLogger
from tracktrain.loggers.delivery import DeliveryQueue, Record, read_spill

from .trainer._tasks import Classifier, make_loader

ROOT = Path(__file__).resolve().parents[1]


def test_csv_logger_is_the_default_and_holds_every_published_value(tmp_path):
    trainer = Trainer(max_epochs=2, enable_progress_bar=False, enable_checkpointing=False, default_root_dir=tmp_path,
                      log_every_n_steps=4)
    trainer.fit(Classifier(), make_loader(), make_loader())
    run_dir = tmp_path / "logs" / "version_0"
    rows = list(csv.DictReader(open(run_dir / "metrics.csv")))
    assert [int(r["step"]) for r in rows if r["name"] == "train_loss"] == [4, 8, 12, 16]
    assert [int(r["step"]) for r in rows if r["name"] == "val_loss"] == [8, 16]
    last_val = [r for r in rows if r["name"] == "val_loss"][-1]
    assert float(last_val["value"]) == pytest.approx(trainer.logged_metrics["val_loss"])
    # every tracker gets the same axes: the step, and the epoch and samples behind it
    samples = {int(r["step"]): float(r["value"]) for r in rows if r["name"] == "samples_seen"}
    epochs = {int(r["step"]): float(r["value"]) for r in rows if r["name"] == "epoch"}
    assert samples == {4: 32.0, 8: 64.0, 12: 96.0, 16: 128.0} and epochs[4] == 0.0 and epochs[12] == 1.0
    assert json.loads((run_dir / "hparams.json").read_text())["trainer/max_epochs"] == 2
    assert (run_dir / "status.txt").read_text().strip() == "FINISHED"


def test_a_failed_fit_marks_the_run_failed(tmp_path):
    class Broken(Classifier):
        def train_step(self, batch, batch_idx):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        Trainer(max_epochs=1, enable_progress_bar=False, default_root_dir=tmp_path).fit(Broken(), make_loader())
    assert (tmp_path / "logs" / "version_0" / "status.txt").read_text().strip() == "FAILED"


def test_a_resumed_fit_continues_the_same_run(tmp_path):
    from tracktrain.callbacks import ModelCheckpoint

    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt")
    options = dict(enable_progress_bar=False, default_root_dir=tmp_path, log_every_n_steps=8)
    Trainer(max_epochs=1, callbacks=[checkpoint], **options).fit(Classifier(), make_loader())
    Trainer(max_epochs=2, **options).fit(Classifier(), make_loader(), ckpt_path=checkpoint.best_model_path)
    assert os.listdir(tmp_path / "logs") == ["version_0"]  # one run, continued
    rows = list(csv.DictReader(open(tmp_path / "logs" / "version_0" / "metrics.csv")))
    assert [int(r["step"]) for r in rows if r["name"] == "train_loss"] == [8, 16]


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
    assert (tmp_path / "logs" / "version_0" / "status.txt").read_text().strip() == "KILLED"


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


def test_a_down_tracker_never_blocks_and_gets_everything_in_order_when_back(tmp_path):
    tracker = Flaky()
    queue = DeliveryQueue(tracker.send, tmp_path / "spill.jsonl", {"logger": "x"}, max_pending=50, max_backoff=0.2)
    slowest = 0.0
    for step in range(300):
        started = time.perf_counter()
        queue.put(Record("metrics", {"loss": float(step)}, step))
        slowest = max(slowest, time.perf_counter() - started)
    assert slowest < 0.05  # spilling to disk included
    assert (tmp_path / "spill.jsonl").exists()
    tracker.up.set()
    assert queue.flush(timeout=20)
    assert [record.step for record in tracker.received] == list(range(300))
    assert queue.close() == 0 and not (tmp_path / "spill.jsonl").exists()


def test_what_cannot_be_delivered_stays_in_the_spill_file(tmp_path):
    tracker = Flaky()
    queue = DeliveryQueue(tracker.send, tmp_path / "spill.jsonl", {"logger": "x", "run_id": "r1"}, max_backoff=0.1)
    for step in range(20):
        queue.put(Record("metrics", {"loss": float(step)}, step))
    started = time.monotonic()
    assert queue.close(timeout=1.0) == 20
    assert time.monotonic() - started < 5
    header, records = read_spill(tmp_path / "spill.jsonl")
    assert header == {"logger": "x", "run_id": "r1"} and [r.step for r in records] == list(range(20))


class ListLogger(QueuedLogger):
    """A QueuedLogger whose 'tracker' is a JSON file: lets the replay command be tested end to end."""

    name = "list"

    def __init__(self, target: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.target = target

    def _open(self, root_dir: str) -> str:
        return "run-1"

    def _send(self, records: list[Record]) -> None:
        if os.environ.get("LIST_TRACKER_DOWN"):
            raise ConnectionError("down")
        with open(self.target, "a") as out:
            for record in records:
                out.write(json.dumps({"step": record.step, **record.payload}) + "\n")

    def _close(self, status: str) -> None:
        if not os.environ.get("LIST_TRACKER_DOWN"):
            Path(self.target).with_suffix(".status").write_text(status)

    def _spill_header(self) -> dict:
        return {**super()._spill_header(), "target": self.target}

    @classmethod
    def for_replay(cls, header) -> ListLogger:
        logger = cls(header["target"])
        logger.resume(header["run_id"])
        return logger


def test_a_run_whose_tracker_stays_down_is_replayed_by_the_documented_command(tmp_path, monkeypatch):
    target = tmp_path / "tracker.jsonl"
    monkeypatch.setenv("LIST_TRACKER_DOWN", "1")
    logger = ListLogger(str(target), close_timeout=0.5)
    logger.start(str(tmp_path))
    for step in range(1, 11):
        logger.log_metrics({"loss": 1.0 / step}, step)
    with pytest.warns(UserWarning, match=r"10 records .* python -m tracktrain.loggers.replay"):
        logger.finalize("FINISHED")
    assert not target.exists()
    result = subprocess.run([sys.executable, "-m", "tracktrain.loggers.replay", logger.spill_path], cwd=ROOT,
                            env={**os.environ, "LIST_TRACKER_DOWN": "", "PYTHONPATH": str(ROOT)},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["step"] for line in target.read_text().splitlines()] == list(range(1, 11))
    assert target.with_suffix(".status").read_text() == "FINISHED"  # the replayed run ends as training did
    assert not os.path.exists(logger.spill_path)


def test_loggers_must_be_loggers():
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

    model = nn.Linear(4, 2)
    trainer = create_supervised_trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss())
    Average(output_transform=lambda loss: loss).attach(trainer, "epoch_loss")
    logger = CSVLogger(tmp_path / "logs")
    attach_loggers(trainer, [logger], root_dir=tmp_path, output_transform=lambda loss: {"loss": loss}, every=4,
                   hyperparams={"lr": 0.1})
    trainer.run(make_loader(), max_epochs=2)
    rows = list(csv.DictReader(open(tmp_path / "logs" / "version_0" / "metrics.csv")))
    assert [int(r["step"]) for r in rows if r["name"] == "loss"] == [4, 8, 12, 16]
    assert [int(r["step"]) for r in rows if r["name"] == "epoch_loss"] == [8, 16]
    assert (tmp_path / "logs" / "version_0" / "status.txt").read_text().strip() == "FINISHED"


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


def test_a_send_still_hanging_at_close_is_kept_in_the_spill_file(tmp_path):
    release = threading.Event()

    def hanging_send(batch):
        release.wait(10)
        raise ConnectionError("timed out")

    queue = DeliveryQueue(hanging_send, tmp_path / "spill.jsonl", {"logger": "x"}, linger=0.0, max_backoff=0.1)
    for step in range(3):
        queue.put(Record("metrics", {"loss": 1.0}, step))
    time.sleep(0.2)  # the thread is now inside the hanging send
    assert queue.close(timeout=0.5) == 3
    release.set()
    _, records = read_spill(tmp_path / "spill.jsonl")
    assert sorted(r.step for r in records if r.kind == "metrics") == [0, 1, 2]
