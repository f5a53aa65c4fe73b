"""WandbLogger against the real W&B SDK in offline mode: every run is read back from the transaction log W&B writes
(`<save_dir>/wandb/offline-run-*/run-<id>.wandb`) with W&B's own reader, `wandb leet inspect --json`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tracktrain import Trainer
from tracktrain.callbacks.base import Callback
from tracktrain.callbacks.model_checkpoint import ModelCheckpoint

from ..trainer._tasks import Classifier, make_loader, quiet
from ._wandb_runs import read_run

pytest.importorskip("wandb")
from tracktrain_integrations.wandb import WandbLogger  # noqa: E402


@pytest.fixture(scope="module")
def wandb_sandbox(tmp_path_factory) -> Path:
    """One folder for W&B's files in this module: the environment stays the same from test to test, so the sender
    child a run leaves warm (delivery="process") serves the next test's run."""
    return tmp_path_factory.mktemp("wandb-sandbox")


@pytest.fixture(autouse=True)
def offline_wandb(wandb_sandbox, monkeypatch):
    """W&B offline, silent, and with every folder it writes (and its login) inside the sandbox."""
    for variable in ("WANDB_DIR", "WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR"):
        folder = wandb_sandbox / variable.lower()
        folder.mkdir(exist_ok=True)
        monkeypatch.setenv(variable, str(folder))
    monkeypatch.setenv("HOME", str(wandb_sandbox / "home"))  # no ~/.netrc API key from the machine
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens there: no traffic leaves


def started(tmp_path, **kwargs) -> WandbLogger:
    logger = WandbLogger(**kwargs)
    logger.start(str(tmp_path / "root"))
    return logger


def test_values_hyperparameters_and_tags_are_read_back_from_the_offline_run(tmp_path, wandb_sandbox):
    logger = started(tmp_path, project="proj", name="first", config={"seed": 7}, tags=["baseline"])
    logger.log_hyperparams({"module": {"lr": 0.1, "width": 32}, "trainer/max_epochs": 2})
    logger.log_metrics({"loss": 1.5}, step=1)
    logger.log_metrics({"loss": 1.25}, step=2)
    logger.set_tags({"stage": "test", "smoke": ""})
    logger.log_metrics({"loss": 1.0}, step=4)
    assert logger.flush(60)
    sender = logger.sender_pid  # the rows went through a child attached to the run
    logger.finalize("FINISHED")

    assert logger.delivery == "process" and sender not in (None, os.getpid())
    assert Path(logger.run_dir).parent == wandb_sandbox / "wandb_dir" / "wandb"  # WANDB_DIR before the root dir
    run = read_run(logger.run_dir)
    assert run["run"]["run_id"] == logger.run_id and run["run"]["project"] == "proj"
    assert run["run"]["display_name"] == "first"
    assert run["history"] == [{"_step": 1, "loss": 1.5}, {"_step": 2, "loss": 1.25}, {"_step": 4, "loss": 1.0}]
    state = run["state"]
    assert state["config"] == {"seed": 7, "module/lr": 0.1, "module/width": 32, "trainer/max_epochs": 2}
    assert state["tags"] == ["baseline", "stage:test", "smoke"]
    assert state["summary"]["loss"] == 1.0 and state["summary"]["_step"] == 4
    assert state["summary"]["tracktrain/status"] == "FINISHED"
    assert run["exit_code"] == 0 and state["state"] == "finished"
    assert logger.undelivered == 0 and logger.skipped_records == 0
    assert not Path(logger.spill_path).exists()


@pytest.mark.parametrize("delivery", ["process", "thread"])
def test_the_run_keeps_the_installed_packages_as_w_and_b_does(tmp_path, delivery):
    """W&B's init lists the installed packages in the run's requirements.txt; with a sender child the child writes
    it (the training process skips that work at start), with the same lines."""
    from importlib.metadata import version

    logger = started(tmp_path, project="proj", delivery=delivery)
    logger.log_metrics({"loss": 1.0}, step=1)
    logger.finalize("FINISHED")
    requirements = (Path(logger.run_dir) / "files" / "requirements.txt").read_text().splitlines()
    assert f"wandb=={version('wandb')}" in requirements and f"mlflow=={version('mlflow')}" in requirements
    assert all(re.fullmatch(r"[^=\s]+==\S+", line) for line in requirements)
    assert "requirements.txt" in read_run(logger.run_dir)["files"]  # uploaded by `wandb sync`


def test_everything_published_at_one_step_shares_its_row_across_batches(tmp_path):
    """Train, validation and epoch values published at one global step, delivered in separate batches: W&B keeps
    the row open, so none is dropped as a non-increasing step."""
    logger = started(tmp_path)
    logger.log_metrics({"train_loss": 0.9}, step=8)
    assert logger.flush(timeout=10)  # the next publish at step 8 goes in another batch
    logger.log_metrics({"val_loss": 0.8, "val_acc": 0.5}, step=8)
    assert logger.flush(timeout=10)
    logger.log_metrics({"epoch": 0.0, "train_loss_epoch": 0.95}, step=8)
    logger.log_metrics({"train_loss": 0.7}, step=9)
    logger.log_metrics({"val_loss": 0.6}, step=9)  # same step, same batch
    logger.finalize("FINISHED")

    assert read_run(logger.run_dir)["history"] == [
        {"_step": 8, "train_loss": 0.9, "val_loss": 0.8, "val_acc": 0.5, "epoch": 0, "train_loss_epoch": 0.95},
        {"_step": 9, "train_loss": 0.7, "val_loss": 0.6},
    ]


def test_a_step_older_than_one_logged_is_reported_not_dropped_silently(tmp_path, caplog):
    logger = started(tmp_path)
    logger.log_metrics({"loss": 1.0}, step=5)
    logger.log_metrics({"loss": 2.0}, step=3)
    assert logger.flush(timeout=10)
    with pytest.warns(UserWarning, match=r"1 metric records for W&B run .* were not logged"):
        logger.finalize("FINISHED")
    assert logger.skipped_records == 1
    assert "1 metric records at steps [3] not logged" in caplog.text
    assert read_run(logger.run_dir)["history"] == [{"_step": 5, "loss": 1.0}]


@pytest.mark.parametrize(("status", "exit_code", "state"), [("FAILED", 1, "failed"), ("KILLED", 255, "failed")])
def test_a_failed_or_killed_run_is_marked_so(tmp_path, status, exit_code, state):
    logger = started(tmp_path)
    logger.log_metrics({"loss": 1.0}, step=1)
    logger.finalize(status)
    run = read_run(logger.run_dir)
    assert run["exit_code"] == exit_code and run["state"]["state"] == state
    assert run["state"]["summary"]["tracktrain/status"] == status  # W&B's state alone cannot tell them apart


def test_a_resumed_run_keeps_its_id_and_continues_the_step_axis(tmp_path):
    first = started(tmp_path)
    first.log_metrics({"loss": 1.0}, step=1)
    first.log_metrics({"loss": 0.9}, step=2)
    first.finalize("KILLED")

    second = WandbLogger()
    second.resume(first.run_id)  # what the Trainer does with the run id saved in a checkpoint
    second.start(str(tmp_path / "root"))
    second.log_metrics({"loss": 0.8}, step=3)
    second.finalize("FINISHED")

    assert second.run_id == first.run_id and second.run_dir != first.run_dir  # W&B offline: one folder per attempt
    resumed = read_run(second.run_dir)
    assert resumed["run"]["run_id"] == first.run_id and resumed["run"]["resume"] is True
    assert resumed["history"] == [{"_step": 3, "loss": 0.8}]
    assert read_run(first.run_dir)["history"] == [{"_step": 1, "loss": 1.0}, {"_step": 2, "loss": 0.9}]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states in /proc")
def test_a_sender_child_killed_mid_run_is_replaced_and_every_row_arrives(tmp_path):
    import signal

    logger = started(tmp_path)
    logger.sender_keep_warm = 0.0
    for step in range(1, 31):
        logger.log_metrics({"loss": float(step)}, step=step)
    assert logger.flush(60)
    first = logger.sender_pid
    os.kill(first, signal.SIGKILL)
    for step in range(31, 61):
        logger.log_metrics({"loss": float(step)}, step=step)
    assert logger.flush(60)
    second = logger.sender_pid
    logger.finalize("FINISHED")

    assert second not in (None, first) and not Path(f"/proc/{first}").exists()  # reaped
    run = read_run(logger.run_dir)
    assert run["history"] == [{"_step": step, "loss": float(step)} for step in range(1, 61)]
    assert logger.skipped_records == 0 and run["exit_code"] == 0


def test_an_artifact_is_a_model_artifact_with_its_step(tmp_path):
    checkpoint = tmp_path / "checkpoint_6.pt"
    torch.save({"w": torch.ones(2)}, checkpoint)
    logger = started(tmp_path)
    logger.log_metrics({"loss": 1.0}, step=6)
    logger.log_artifact(str(checkpoint), "checkpoints")
    logger.finalize("FINISHED")

    (artifact,) = read_run(logger.run_dir)["artifacts"]
    assert artifact["type"] == "model" and artifact["name"] == f"checkpoints-{logger.run_id}"
    assert sorted(artifact["aliases"]) == ["latest", "step-6"]
    assert json.loads(artifact["metadata"])["global_step"] == 6
    assert json.loads(artifact["metadata"])["original_filename"] == "checkpoint_6.pt"
    (entry,) = artifact["manifest"]["contents"]
    assert entry["path"] == "checkpoint_6.pt" and int(entry["size"]) == checkpoint.stat().st_size


def test_an_artifact_gone_before_upload_is_reported(tmp_path, caplog):
    logger = started(tmp_path)
    logger.log_artifact(str(tmp_path / "evicted.pt"))
    logger.finalize("FINISHED")
    assert "evicted.pt no longer exists; not uploaded" in caplog.text
    assert read_run(logger.run_dir)["artifacts"] == []


def test_a_checkpoint_retention_deleted_before_its_upload_is_skipped_without_a_word(tmp_path, caplog):
    logger = started(tmp_path)
    logger.log_artifact(str(tmp_path / "checkpoint_4.pt"), "checkpoints")
    logger.finalize("FINISHED")
    assert "no longer exists" not in caplog.text  # the warning a missing artifact of another kind gets
    assert read_run(logger.run_dir)["artifacts"] == []


def test_hyperparameters_w_and_b_cannot_store_are_kept_as_text(tmp_path):
    logger = started(tmp_path)
    logger.log_hyperparams({"dtype": torch.float16, "device": torch.device("cpu"), "sizes": (1, 2), "none": None})
    logger.finalize("FINISHED")
    assert logger.undelivered == 0
    config = read_run(logger.run_dir)["state"]["config"]
    assert config == {"dtype": "torch.float16", "device": "cpu", "sizes": [1, 2], "none": None}


def test_the_documented_replay_command_delivers_a_spill_file_to_the_same_run(tmp_path):
    """A run whose records could not be delivered leaves a spill file; `python -m tracktrain.loggers.replay`
    (a separate process, as a user would run it) sends them to the same W&B run."""
    logger = started(tmp_path)
    logger.log_metrics({"loss": 1.0}, step=1)
    logger.finalize("FAILED")
    spill = tmp_path / "wandb-spilled.undelivered.jsonl"
    lines = [
        {"header": logger._spill_header()},
        {"kind": "metrics", "payload": {"loss": 0.5}, "step": 2, "timestamp": 0.0},
        {"kind": "metrics", "payload": {"acc": 0.75}, "step": 2, "timestamp": 0.0},
        {"kind": "params", "payload": {"lr": 0.1}, "step": None, "timestamp": 0.0},
    ]
    spill.write_text("".join(json.dumps(line) + "\n" for line in lines))

    # as from a fresh shell: its own W&B service, not this process's (whose address W&B leaves in the environment)
    environment = {key: value for key, value in os.environ.items() if key != "WANDB_SERVICE"}
    result = subprocess.run(
        [sys.executable, "-m", "tracktrain.loggers.replay", str(spill)],
        capture_output=True,
        text=True,
        timeout=60,
        env=environment,
    )
    assert result.returncode == 0, result.stderr
    assert "3 records delivered" in result.stdout and not spill.exists()
    attempts = sorted(Path(logger.run_dir).parent.glob(f"offline-run-*-{logger.run_id}*"))
    (replayed,) = [folder for folder in attempts if folder != Path(logger.run_dir)]
    run = read_run(replayed)
    assert run["run"]["run_id"] == logger.run_id
    assert run["history"] == [{"_step": 2, "loss": 0.5, "acc": 0.75}]
    assert run["state"]["config"] == {"lr": 0.1}


# ------------------------------------------------------------------------------------------------ bad input
def test_missing_wandb_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ImportError, match=r"pip install 'tracktrain\[wandb\]'"):
        WandbLogger()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"mode": "onlin"}, ValueError, r"mode=\.\.\.\) must be one of .* got 'onlin'"),
        ({"watch": "grads"}, ValueError, r"watch=\.\.\.\) must be one of .* got 'grads'"),
        ({"resume": True}, ValueError, r"resume=\.\.\.\) must be one of .* got True"),
        ({"tags": ["x" * 65]}, ValueError, r"tags=\.\.\.\) takes strings of 1 to 64 characters"),
        ({"jobtype": "train"}, TypeError, r"wandb.init does not take: \[.jobtype.\]; see help\(wandb.init\)"),
        ({"watch": "all", "delivery": "process"}, ValueError, r"watch='all'\) .* pass delivery='thread' or None"),
    ],
)
def test_bad_arguments_fail_at_construction(kwargs, error, message):
    with pytest.raises(error, match=message):
        WandbLogger(**kwargs)


def test_online_without_a_login_fails_at_start_with_the_fix(tmp_path):
    logger = WandbLogger(mode="online")
    with pytest.raises(RuntimeError, match=r"W&B could not start the run .*No API key.*mode='offline'"):
        logger.start(str(tmp_path / "root"))
    with pytest.raises(RuntimeError, match="not started"):
        logger.log_metrics({"loss": 1.0}, step=1)


def test_long_tags_are_shortened_to_what_w_and_b_takes(tmp_path, caplog):
    logger = started(tmp_path)
    logger.set_tags({"note": "y" * 80})
    logger.finalize("FINISHED")
    assert read_run(logger.run_dir)["state"]["tags"] == [("note:" + "y" * 80)[:64]]
    assert "longer than 64 characters" in caplog.text


# ------------------------------------------------------------------------------------------- with the Trainer
class WatchAtFitStart(Callback):
    """Hands the module to the logger's `watch_module` (the Trainer started its run before any hook)."""

    def __init__(self, logger: WandbLogger) -> None:
        self.logger = logger

    def on_fit_start(self, trainer, module):
        self.logger.watch_module(module)


def test_a_trainer_run_lands_in_one_w_and_b_run(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_DIR")  # the run goes under the Trainer's root dir
    logger = WandbLogger(project="e2e", log_checkpoints=True, watch="gradients", watch_log_freq=4)
    # the delivery thread running behind, as on a busy machine: every batch reaches W&B 0.3 s late
    send = logger._send
    monkeypatch.setattr(logger, "_send", lambda records: (time.sleep(0.3), send(records))[1])
    checkpoints = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=None)
    trainer = Trainer(
        **quiet(
            tmp_path,
            max_epochs=2,
            log_every_n_steps=4,
            loggers=[logger],
            callbacks=[checkpoints, WatchAtFitStart(logger)],
        )
    )
    trainer.fit(Classifier(), make_loader(), make_loader())

    assert Path(logger.run_dir).parent == tmp_path / "wandb"
    run = read_run(logger.run_dir)
    # W&B's gradient hooks log without a step, into the row open at the time: some rows hold only histograms
    scalars = [{key: value for key, value in row.items() if not key.startswith("gradients/")} for row in run["history"]]
    scalars = [row for row in scalars if len(row) > 1]
    assert [row["_step"] for row in scalars] == [4, 8, 12, 16]  # 8 optimizer steps per epoch, published every 4
    assert all("val_loss" in row for row in scalars if row["_step"] in (8, 16))  # the same row as train_loss
    assert scalars[-1]["val_loss"] == pytest.approx(trainer.logged_metrics["val_loss"])
    assert scalars[-1]["train_loss"] == pytest.approx(trainer.logged_metrics["train_loss"])
    # W&B names the hooks' keys after the module, prefixed "graph_N" when its process watched another module before
    weight = [
        next(
            (
                key[: -len("._type")]
                for key in row
                if re.fullmatch(r"gradients/(graph_\d+)?net\.weight\._type", key) and row[key] == "histogram"
            ),
            None,
        )
        for row in run["history"]
    ]
    histograms = [(row, key) for row, key in zip(run["history"], weight) if key is not None]
    # every 4th of 16 backward passes, each in the row of the step published last before it (step 0: none yet)
    assert [row["_step"] for row, _ in histograms] == [0, 4, 8, 12]
    assert all(len(row[f"{key}.bins"]) == len(row[f"{key}.values"]) + 1 for row, key in histograms)
    config = run["state"]["config"]
    assert config["trainer/max_epochs"] == 2 and config["module/class"] == "Classifier"
    assert [json.loads(artifact["metadata"])["global_step"] for artifact in run["artifacts"]] == [8, 16]
    assert run["exit_code"] == 0 and run["state"]["summary"]["tracktrain/status"] == "FINISHED"


def test_a_fit_resumed_from_a_checkpoint_continues_the_same_run(tmp_path):
    first = WandbLogger()
    checkpoints = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=None)
    Trainer(**quiet(tmp_path, max_epochs=1, log_every_n_steps=4, loggers=[first], callbacks=[checkpoints])).fit(
        Classifier(), make_loader(), make_loader()
    )

    second = WandbLogger()
    trainer = Trainer(**quiet(tmp_path, max_epochs=2, log_every_n_steps=4, loggers=[second]))
    trainer.fit(Classifier(), make_loader(), make_loader(), ckpt_path=checkpoints.best_model_path)

    assert second.run_id == first.run_id
    assert [row["_step"] for row in read_run(first.run_dir)["history"]] == [4, 8]
    resumed = read_run(second.run_dir)
    assert resumed["run"]["run_id"] == first.run_id and resumed["runs"][0]["resume"] is True
    assert [row["_step"] for row in resumed["history"]] == [12, 16]  # the global step goes on
    assert "tracktrain.changed.trainer/max_epochs:1 -> 2 (resumed at step 8)" in resumed["run"]["tags"]


def test_with_watch_a_tracker_that_does_not_answer_costs_one_wait_not_one_per_step(tmp_path, monkeypatch, caplog):
    """Publishing waits for its row only while W&B takes the rows: once a wait times out, training goes on without
    waiting (a dead tracker never stalls training), and says once that histograms may now share rows."""
    import tracktrain_integrations.wandb as wandb_module

    monkeypatch.setattr(wandb_module, "WATCH_DELIVERY_TIMEOUT", 0.2)
    logger = WandbLogger(watch="gradients", watch_log_freq=1)
    send = logger._send
    monkeypatch.setattr(logger, "_send", lambda records: (time.sleep(0.5), send(records))[1])  # far behind
    logger.start(str(tmp_path / "root"))
    logger.watch_module(torch.nn.Linear(2, 1))

    waits = []
    for step in range(1, 6):
        started_at = time.monotonic()
        logger.log_metrics({"loss": 1.0 / step}, step)
        waits.append(time.monotonic() - started_at)
    logger.finalize("FINISHED")

    assert waits[0] >= 0.2 and sum(waits[1:]) < 0.2, waits
    assert sum("training no longer waits" in record.getMessage() for record in caplog.records) == 1
