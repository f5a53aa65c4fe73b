"""Ray Train, for real: `TorchTrainer` runs the Trainer through `tracktrain_integrations.ray.fit` — in Ray's local mode
(`num_workers=0`, the training function in this process: seconds), and on a local Ray cluster (2 CPUs) in 2 workers
that train data-parallel over the gloo group Ray starts. Ray receives every committed checkpoint with the values the
run logged, and a Ray run resumed from one of them (given, or Ray's own after it restarted a lost worker) ends with the
weights of the uninterrupted run."""

from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")
from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig  # noqa: E402
from ray.train.torch import TorchConfig, TorchTrainer  # noqa: E402

from tests import _processes  # noqa: E402
from tracktrain import Trainer  # noqa: E402
from tracktrain.callbacks import Callback, ModelCheckpoint  # noqa: E402
from tracktrain.checkpoint.discovery import committed_checkpoints  # noqa: E402
from tracktrain.checkpoint.state import read_checkpoint  # noqa: E402
from tracktrain.loggers import CSVLogger  # noqa: E402
from tracktrain_integrations import ray as tracktrain_ray  # noqa: E402

from ..trainer._tasks import Classifier, make_loader  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# Ray's own, on importing ray.data (ray.train imports it): not this project's to fix
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")


class RecordStart(Callback):
    """Writes where each rank's fit starts (its global step and the checkpoint it resumed from) into the run's root."""

    def on_train_start(self, trainer, module):
        record = {"global_step": trainer.global_step, "ckpt_path": trainer.ckpt_path}
        Path(trainer.default_root_dir, f"start_rank{trainer.strategy.global_rank}.json").write_text(json.dumps(record))


class CrashOnce(Callback):
    """Rank 1 dies at the end of the second epoch of the first attempt, before that epoch's report to Ray, as a lost
    worker would: Ray restarts the workers, which resume from the last checkpoint Ray received (the first epoch's,
    which Ray has registered by then: a report is registered shortly after the call, not within it)."""

    def on_train_epoch_end(self, trainer, module):
        marker = Path(trainer.default_root_dir, "crashed")
        if trainer.strategy.global_rank == 1 and trainer.current_epoch == 1 and not marker.exists():
            ray.train.get_all_reported_checkpoints(consistency_mode=ray.train.CheckpointConsistencyMode.COMMITTED)
            marker.write_text("")
            os._exit(1)


def train_loop(config: dict) -> None:
    """The training function of every Ray worker (of this process, in local mode)."""
    callbacks = [ModelCheckpoint(save_top_k=None), RecordStart()]
    if config.get("every_n_train_steps"):  # a second checkpointer, on a step schedule, in a directory of its own
        directory = os.path.join(config["root"], "step_checkpoints")
        steps = config["every_n_train_steps"]
        callbacks.append(ModelCheckpoint(directory, "steps", save_top_k=None, every_n_train_steps=steps))
    callbacks += [tracktrain_ray.RayTrainReport()] if config.get("report", True) else []
    callbacks += [CrashOnce()] if config.get("crash_once") else []
    trainer = Trainer(
        max_epochs=config["max_epochs"],
        strategy=config["strategy"],
        seed=0,
        log_every_n_steps=1,
        enable_progress_bar=False,
        default_root_dir=config["root"],
        callbacks=callbacks,
        loggers=[CSVLogger()],  # what the tests read back (the default is TensorBoard's where it is installed)
    )
    loader = make_loader(shuffle=True)
    resume = {"ckpt_path": config["ckpt_path"]} if "ckpt_path" in config else {"checkpoint": config.get("checkpoint")}
    tracktrain_ray.fit(trainer, Classifier(), loader, make_loader(seed=1), **resume)


def run(storage: Path, name: str, workers: int, failures: int = 0, **config):
    """A TorchTrainer run of `train_loop` with `workers` workers (0: Ray's local mode, in this process)."""
    config.setdefault("strategy", "ddp" if workers else "auto")
    trainer = TorchTrainer(
        train_loop,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=False),
        torch_config=TorchConfig(backend="gloo", timeout_s=60),  # a hang fails in a minute
        run_config=RunConfig(
            name=name,
            storage_path=str(storage),
            checkpoint_config=CheckpointConfig(num_to_keep=None),
            failure_config=FailureConfig(max_failures=failures),
        ),
    )
    return trainer.fit()


def tracktrain_checkpoint(ray_checkpoint) -> tuple[str, dict, dict[str, torch.Tensor]]:
    """The tracktrain checkpoint inside a Ray checkpoint (found by `checkpoint_path`): its file name, the summary its
    manifest records, and the model weights (checked against the manifest's sizes and SHA-256 on reading)."""
    with tracktrain_ray.checkpoint_path(ray_checkpoint) as path:
        assert path is not None, f"no tracktrain checkpoint found in {ray_checkpoint}"
        directory, name = os.path.split(path)
        checkpoints, problems = committed_checkpoints(directory)
        assert [checkpoint.data_filename for checkpoint in checkpoints] == [name] and not problems
        return name, checkpoints[0].summary, read_checkpoint(path)["model"]


def logged_values(root: Path) -> dict[tuple[int, str], float]:
    """What the run logged with its CSVLogger: {(step, name): value}."""
    (metrics_file,) = root.glob("lightning_logs/*/metrics.csv")
    with metrics_file.open() as rows:  # a row per logged step, a column per metric
        return {
            (int(row["step"]), name): float(value)
            for row in csv.DictReader(rows)
            for name, value in row.items()
            if name != "step" and value != ""
        }


def assert_reported_as_logged(metrics: dict, root: Path, step: int, epoch: int) -> None:
    """`metrics`, reported at `step`, are the values the run had logged by then (each its latest)."""
    assert (metrics["global_step"], metrics["epoch"]) == (step, epoch)
    values = {key: value for key, value in metrics.items() if key not in ("epoch", "global_step")}
    assert "train_loss" in values
    logged = logged_values(root)
    latest = {key: max(at for at, name in logged if name == key and at <= step) for key in values}
    assert values == pytest.approx({key: logged[(latest[key], key)] for key in values}, rel=1e-6)
    assert latest["train_loss"] == step


def assert_same_weights(weights: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert weights.keys() == expected.keys()
    for key in weights:
        assert torch.equal(weights[key], expected[key]), key


def start_of(root: Path, rank: int = 0) -> dict:
    return json.loads((root / f"start_rank{rank}.json").read_text())


# ------------------------------------------------------------------------------------------ local mode: one process
def test_local_mode_reports_checkpoints_and_resumes_from_one(tmp_path, monkeypatch, without_tensorboard):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "staging"))  # in local mode Ray keeps the staged folder
    (tmp_path / "staging").mkdir()
    storage = tmp_path / "ray"
    first = run(storage, "first", 0, root=str(tmp_path / "first"), max_epochs=2)  # 8 steps an epoch
    name, summary, _ = tracktrain_checkpoint(first.checkpoint)
    assert (name, summary["global_step"]) == ("checkpoint_16.pt", 16)
    assert_reported_as_logged(first.metrics, tmp_path / "first", step=16, epoch=1)

    resumed_root = tmp_path / "resumed"
    resumed = run(storage, "resumed", 0, root=str(resumed_root), max_epochs=3, checkpoint=first.checkpoint)
    assert start_of(resumed_root)["global_step"] == 16
    assert Path(start_of(resumed_root)["ckpt_path"]).name == "checkpoint_16.pt"
    plain = run(storage, "plain", 0, root=str(tmp_path / "plain"), max_epochs=3)
    _, summary, weights = tracktrain_checkpoint(resumed.checkpoint)
    _, plain_summary, plain_weights = tracktrain_checkpoint(plain.checkpoint)
    assert summary["global_step"] == plain_summary["global_step"] == 24
    assert_same_weights(weights, plain_weights)


def test_fit_refuses_a_trainer_that_does_not_report(tmp_path):
    with pytest.raises(ValueError, match=r"does not report to Ray.*callbacks=\[RayTrainReport\(\)"):
        run(tmp_path / "ray", "silent", 0, root=str(tmp_path / "silent"), max_epochs=1, report=False)


def test_fit_takes_ray_checkpoints_not_paths(tmp_path):
    with pytest.raises(TypeError, match=r"give a ray\.train\.Checkpoint as checkpoint=\.\.\., not ckpt_path='last'"):
        run(tmp_path / "ray", "path", 0, root=str(tmp_path / "path"), max_epochs=1, ckpt_path="last")


def test_checkpoint_path_refuses_what_is_not_a_committed_checkpoint(tmp_path):
    (tmp_path / "checkpoint_4.pt").write_bytes(b"no manifest")
    with pytest.raises(FileNotFoundError, match=r"holds no committed tracktrain checkpoint.*checkpoint_4\.pt"):
        with tracktrain_ray.checkpoint_path(ray.train.Checkpoint.from_directory(tmp_path)):
            pass
    with pytest.raises(TypeError, match=r"must be a ray\.train\.Checkpoint.*got str"):
        with tracktrain_ray.checkpoint_path(str(tmp_path)):
            pass


def test_report_prefix_must_be_a_folder_name():
    with pytest.raises(ValueError, match=r"checkpoint_dir_prefix=\.\.\.\) must be a non-empty folder name"):
        tracktrain_ray.RayTrainReport(checkpoint_dir_prefix="a/b")


# --------------------------------------------------------------------------------- a Ray cluster: 2 worker processes
@pytest.fixture
def ray_cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A local Ray cluster of this test's own (2 CPUs), shut down when the test ends, after which the test waits for
    its processes (raylet, GCS, workers) to exit."""
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.setenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.2")  # the controller sees a run end sooner
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the workers import this module's train_loop
    before = _processes.descendants(os.getpid())
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", _temp_dir=temp_dir, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
        _wait_for_exit(before, timeout=30)
        shutil.rmtree(temp_dir, ignore_errors=True)  # Ray's session: logs, sockets, spilled objects


def _wait_for_exit(before: set[int], timeout: float) -> None:
    """Wait until the processes this test started (below this one, or carrying its marker) have exited; what still
    runs then is stopped by tests/conftest.py, with a warning."""
    marker = os.environ.get(_processes.TEST_MARKER)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        table = _processes.process_table()
        running = _processes.descendants(os.getpid(), table) - before
        running |= _processes.carrying(_processes.TEST_MARKER, marker) if marker else set()
        if not {pid for pid in running if pid in table and table[pid][1] not in "ZX" and pid != os.getpid()}:
            return
        time.sleep(0.2)


@pytest.mark.slow  # a Ray cluster of 2 workers, ~40 s (so is the README's Ray block, in the slow run too)
@pytest.mark.distributed
def test_two_workers_report_every_checkpoint_with_the_logged_values(ray_cluster, tmp_path):
    """Checkpoints at every epoch's end (4 steps an epoch on 2 ranks) and every 3 steps (a second ModelCheckpoint):
    Ray receives each one, named by its step, with the values logged by then."""
    root = tmp_path / "run"
    result = run(tmp_path / "ray", "two_workers", 2, root=str(root), max_epochs=3, every_n_train_steps=3)
    assert result.error is None
    reported = sorted(result.best_checkpoints, key=lambda entry: entry[1]["global_step"])
    assert [metrics["global_step"] for _, metrics in reported] == [3, 4, 6, 8, 9, 12]
    for checkpoint, metrics in reported:
        step = metrics["global_step"]
        assert Path(checkpoint.path).parent == tmp_path / "ray" / "two_workers"  # persisted to Ray's storage
        assert Path(checkpoint.path).name == f"tracktrain_step_{step}"
        name, summary, _ = tracktrain_checkpoint(checkpoint)
        expected = {f"checkpoint_{step}.pt"} if step % 4 == 0 else set()
        expected |= {f"steps_checkpoint_{step}.pt"} if step % 3 == 0 else set()
        assert name in expected and summary["global_step"] == step
        assert_reported_as_logged(metrics, root, step, epoch=(step - 1) // 4)
    assert {"val_loss"} <= reported[1][1].keys()  # logged by the first epoch's validation, before its report
    assert result.checkpoint.path == reported[-1][0].path and result.metrics == reported[-1][1]
    assert {start_of(root, rank)["global_step"] for rank in (0, 1)} == {0}

    # outside a Ray Train worker (in a plain Ray task here), fit says where it runs
    @ray.remote(num_cpus=0)
    def fit_in_a_task() -> str:
        try:
            tracktrain_ray.fit(Trainer(callbacks=[tracktrain_ray.RayTrainReport()]), Classifier(), make_loader())
        except RuntimeError as error:
            return str(error)
        return "no error"

    assert "runs inside a Ray Train worker only" in ray.get(fit_in_a_task.remote())


@pytest.mark.slow
@pytest.mark.distributed
def test_a_new_ray_run_resumes_two_workers_from_a_reported_checkpoint(ray_cluster, tmp_path):
    """The checkpoint of epoch 1 of a 3-epoch run, given to a new Ray run (with another root directory, where there is
    nothing to find): both ranks start at its step and the run ends with the uninterrupted run's weights."""
    first = run(tmp_path / "ray", "first", 2, root=str(tmp_path / "first"), max_epochs=3)
    reported = sorted(first.best_checkpoints, key=lambda entry: entry[1]["global_step"])
    resumed_root = tmp_path / "resumed"
    resumed = run(tmp_path / "ray", "resumed", 2, root=str(resumed_root), max_epochs=3, checkpoint=reported[0][0])
    for rank in (0, 1):
        assert start_of(resumed_root, rank)["global_step"] == 4
        assert Path(start_of(resumed_root, rank)["ckpt_path"]).name == "checkpoint_4.pt"
    assert [metrics["global_step"] for _, metrics in resumed.best_checkpoints] == [8, 12]
    assert_same_weights(tracktrain_checkpoint(resumed.checkpoint)[2], tracktrain_checkpoint(first.checkpoint)[2])

    # two workers and a Trainer that would train a model in each: refused before training, with the fix
    with pytest.raises(Exception, match=r"Ray started 2 workers.*strategy='ddp'"):
        run(tmp_path / "ray", "separate", 2, root=str(tmp_path / "separate"), max_epochs=1, strategy="auto")


@pytest.mark.slow
@pytest.mark.distributed
def test_ray_restarts_a_lost_worker_from_the_last_reported_checkpoint(ray_cluster, tmp_path):
    """Rank 1 dies in the second epoch; Ray's FailureConfig restarts both workers, `fit` resumes from Ray's latest
    checkpoint (`ray.train.get_checkpoint()`, the first epoch's), and the run ends with an uninterrupted run's
    weights."""
    root = tmp_path / "crashed"
    result = run(tmp_path / "ray", "crashed", 2, failures=1, root=str(root), max_epochs=3, crash_once=True)
    assert (root / "crashed").exists()
    assert start_of(root)["global_step"] == 4  # the restarted fit's
    assert Path(start_of(root)["ckpt_path"]).parent.name == "tracktrain_step_4"  # in Ray's storage
    plain = run(tmp_path / "ray", "plain", 2, root=str(tmp_path / "plain"), max_epochs=3)
    assert tracktrain_checkpoint(result.checkpoint)[1]["global_step"] == 12
    assert_same_weights(tracktrain_checkpoint(result.checkpoint)[2], tracktrain_checkpoint(plain.checkpoint)[2])
